"""Nothing lost, nothing doubled: jobs run to the end while the worker is SIGKILLed three times.

See `tests.integration.chaos` for the run and what is counted. The batched agents send what a batch
causes before they write its tables, the scheduler commits each cycle once on its feed before
publishing it, and every handler is idempotent, so a batch replayed after a kill changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.broker import EmbeddedBroker
from tests.integration.chaos import run_chaos
from tests.integration.workers import Worker, running_worker

pytestmark = pytest.mark.integration

# The suite runs one seed of 3,000 jobs (about 2 minutes here); FLOTILLA_CHAOS_JOBS=20000 and
# FLOTILLA_CHAOS_SEED=N run the size and other seeds by hand, bench/chaos.py several seeds.
JOBS = int(os.environ.get("FLOTILLA_CHAOS_JOBS", "3000"))
SEED = int(os.environ.get("FLOTILLA_CHAOS_SEED", "21"))


@pytest.fixture
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "chaos", FLOTILLA_EXECUTOR_TIMEOUT_S="6", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


def test_every_job_succeeds_exactly_once_through_three_worker_kills(worker: Worker, tmp_path: Path) -> None:
    report = run_chaos(worker, tmp_path, JOBS, SEED)
    print(report.line())
    assert not report.problems(), "; ".join(report.problems())
