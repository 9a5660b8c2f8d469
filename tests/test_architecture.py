"""The layout holds: the pure core imports no broker, stream or Kubernetes code; the control plane's
layers (app -> agents | api -> plane -> tables -> scheduler -> domain) are respected; Armada's
algorithm imports nothing above it, inside the scheduler (an exhaustive contract: a new scheduler
module must be placed) or outside. The contracts live in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts)} kept, 0 broken" in result.stdout
    assert len(contracts) == 5 and any(c["type"] == "layers" and c.get("exhaustive") for c in contracts)
