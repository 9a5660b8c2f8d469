"""The layout holds: the pure core imports no broker, stream or Kubernetes code; the control plane's
layers (app -> agents | api -> plane -> tables -> scheduler -> domain) are respected; Armada's
algorithm imports nothing above it. The contracts live in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken" in result.stdout
