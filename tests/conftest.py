"""The order the suite runs in (integration test files first), and no time limit on a hypothesis example.

`ops/test` spreads whole test files over processes in collection order (`--dist loadfile
--no-loadscope-reorder`). The integration files take minutes each, mostly waiting on brokers,
workers and executors, and the unit files seconds: handed out first, the long files overlap each
other, and the short ones fill the processes that finish early instead of one long file starting last.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# The suite runs three processes on two cores beside brokers and workers: hypothesis's default 200 ms
# deadline per example turned load into failures (tests/tables/test_standby.py once). Speed is measured in bench/.
settings.register_profile("flotilla", deadline=None)
settings.load_profile("flotilla")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within each file the tests keep their order (some modules build on the tests before).
    items.sort(key=lambda item: "integration" not in item.path.parts)
