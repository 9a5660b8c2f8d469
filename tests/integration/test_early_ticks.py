"""Early ticks lease new work on an idle cluster without waiting for the period.

The worker's period is an hour, so every lease here comes from an early tick. Work that reaches the
scheduler while a tick is in flight, or too soon after one, must get a tick of its own once the gap
has passed, not wait for more work or for the period.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.broker import EmbeddedBroker
from streams.domain.states import ACTIVE, JOB_TERMINAL
from tests.integration.pipeline import Executors, fake_item, new_queue, submit_jobs, wait_states
from tests.integration.workers import Worker, running_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "early", FLOTILLA_SCHEDULE_PERIOD_S="3600") as started:
        yield started


def test_a_job_right_after_another_is_leased_by_an_early_tick_of_its_own(worker: Worker, executors: Executors) -> None:
    executors.fake("early-ex", nodes=4, cpu="8")
    queue = new_queue(worker, "early-burst")
    # The executor is heard once its report reaches the scheduler: the first job waits for that.
    first = submit_jobs(worker, queue, "warm-up", [fake_item(executors.selector, cpu="100m", runtime_s=600)])
    wait_states(worker, first, ACTIVE | JOB_TERMINAL, timeout=60, what="the first job leased by an early tick")

    def submit_after(delay_s: float) -> list[str]:
        time.sleep(delay_s)
        return submit_jobs(worker, queue, "pairs", [fake_item(executors.selector, cpu="100m", runtime_s=600)])

    # Pairs of jobs, the second a little after the first: it reaches the scheduler while the first's
    # tick is in flight, or soon after its cycle, and nothing comes after it.
    for apart_s in (0.02, 0.05, 0.1, 0.2):
        with ThreadPoolExecutor(max_workers=2) as pool:
            job_ids = [job_id for ids in pool.map(submit_after, (0.0, apart_s)) for job_id in ids]
        # Each needs a tick after it: seconds, where the period would take an hour.
        wait_states(worker, job_ids, ACTIVE | JOB_TERMINAL, timeout=15, what=f"both jobs {apart_s} s apart leased without a periodic tick")
    # Some early ticks followed what the owner had folded directly (nothing else on the feed between), and
    # their cycles ran as soon as the broker had taken them, not a fetch wait later when read back.
    assert ticks_run_ahead(worker) >= 1


def ticks_run_ahead(worker: Worker) -> float:
    with urllib.request.urlopen(f"{worker.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    (family,) = (f for f in text_string_to_metric_families(text) if f.name == "flotilla_scheduling_ticks_run_ahead")
    return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
