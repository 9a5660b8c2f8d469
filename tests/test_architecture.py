"""The layout holds: the pure core imports no broker, stream or Kubernetes code; the control plane's
layers (app -> agents | api -> plane -> tables -> scheduler -> domain) are respected and only
streams.app binds the agents and the API; Armada's algorithm imports nothing above it, inside the
scheduler (an exhaustive contract: a new scheduler module must be placed) or outside. The contracts
live in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return found


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken" in result.stdout
    assert len(contracts()) == 7 and any(c["type"] == "layers" and c.get("exhaustive") for c in contracts())


def test_every_part_of_streams_but_the_app_is_kept_from_importing_the_agents_and_the_api() -> None:
    (binding,) = [c for c in contracts() if c["name"] == "Only streams.app binds the agents and the API"]
    parts = {f"streams.{path.stem}" for path in (ROOT / "streams").iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()}
    assert set(binding["source_modules"]) == parts - {"streams.__init__", "streams.app", "streams.agents", "streams.api"}
