"""What a benchmark keeps between its runs: a product made once for a set of options (a recorded log, a
written archive), with what the figures need about it in a JSON file beside it, reused while the options
are the same. Alternated runs then measure the same input, and skip minutes of making it again."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def kept_or_made(meta_path: Path, options: Mapping[str, Any], what: str, make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The metadata kept at ``meta_path`` for ``options``, or ``make()``'s (with the options) kept there now;
    and whether it was kept. Kept for other options, it stops the benchmark: ``what`` names the product."""
    if meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta["options"] != options:
            raise SystemExit(f"{meta_path.parent} holds {what} {meta['options']}, not {dict(options)}")
        return meta, True
    meta = {**make(), "options": dict(options)}
    meta_path.write_text(json.dumps(meta))
    return meta, False
