"""The order the suite runs in: integration test files first.

`ops/test` spreads whole test files over processes in collection order (`--dist loadfile
--no-loadscope-reorder`). The integration files take minutes each, mostly waiting on brokers,
workers and executors, and the unit files seconds: handed out first, the long files overlap each
other, and the short ones fill the processes that finish early instead of one long file starting last.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within each file the tests keep their order (some modules build on the tests before).
    items.sort(key=lambda item: "integration" not in item.path.parts)
