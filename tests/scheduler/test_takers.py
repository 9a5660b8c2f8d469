"""Which executors a cycle places new jobs on: cordoned ones (an administrator's event on the log) and
lagging ones (more unacknowledged runs than `maxUnacknowledgedJobsPerExecutor`) get none, while the
runs they hold go on. Driven through the real fold and index (`tests.kit.loop`), as on the log."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.domain.executor_settings import SETTINGS_JOB_SET, SETTINGS_QUEUE, settings_payload
from streams.scheduler.config import CycleConfig
from streams.scheduler.feed import ExecutorSettings
from streams.scheduler.index import END, SchedulerIndex
from streams.scheduler.takers import held_back, unacknowledged
from tests.kit.loop import Loop, events, leases
from tests.kit.quantities import CPU
from tests.kit.scheduler import delta, executor, nodes, running


def set_cordon(loop: Loop, name: str, cordoned: bool, at: int, reason: str = "") -> None:
    """An administrator's cordon as the API writes it: one event with no job id under the settings key."""
    kind, fields = settings_payload(name, cordoned, reason)
    loop.event(None, kind.rsplit(".", 1)[-1], at, SETTINGS_QUEUE, SETTINGS_JOB_SET, **fields)


def executors_of(loop: Loop, job_ids: list[str]) -> set[str]:
    return {loop.job(job_id)["runs"][-1]["executor"] for job_id in job_ids}


def test_a_cordoned_executor_gets_no_new_job_keeps_its_runs_and_takes_jobs_again_once_uncordoned() -> None:
    loop = Loop()
    loop.submit("early", cpu="1", at=1_000)
    loop.report("ex1", 1_500, nodes(1, cpu=4))
    assert executors_of(loop, list(leases(loop.cycle(2_000)))) == {"ex1"}

    set_cordon(loop, "ex1", True, 2_100, reason="kernel upgrade")
    assert loop.index.settings["ex1"] == ExecutorSettings("ex1", True, "kernel upgrade", "u", 2_100, loop.index.settings["ex1"].event_id)
    for i in range(3):
        loop.submit(f"j{i}", cpu="1", at=2_200)
    loop.report("ex1", 2_500, nodes(1, cpu=4))
    loop.report("ex2", 2_500, nodes(1, cpu=2), pool="default")
    cordoned = loop.cycle(3_000)
    # ex2 takes what fits on it; ex1, with room for all three, takes none, and its run goes on untouched.
    assert len(leases(cordoned)) == 2 and executors_of(loop, list(leases(cordoned))) == {"ex2"}
    assert [kind for job_id, kind, _ in events(cordoned) if job_id == "early"] == []
    assert loop.job("early")["state"] == "leased"

    loop.restart()  # the index rebuilt from its table keeps the cordon
    loop.report("ex1", 3_500, nodes(1, cpu=4))
    loop.report("ex2", 3_500, nodes(1, cpu=2))
    assert leases(loop.cycle(4_000)) == {}

    set_cordon(loop, "ex1", False, 4_100)
    assert not loop.index.cordoned("ex1") and loop.index.settings["ex1"].reason == ""
    loop.report("ex1", 4_500, nodes(1, cpu=4))
    loop.report("ex2", 4_500, nodes(1, cpu=2))
    uncordoned = loop.cycle(5_000)
    assert len(leases(uncordoned)) == 1 and executors_of(loop, list(leases(uncordoned))) == {"ex1"}


def test_an_executor_over_the_unacknowledged_limit_gets_no_new_job_until_it_lists_its_runs() -> None:
    loop = Loop(config=CycleConfig(max_unacknowledged_runs=2))
    for i in range(3):
        loop.submit(f"first{i}", at=1_000)
    loop.report("ex1", 1_500)
    first = list(leases(loop.cycle(2_000)))
    assert len(first) == 3
    runs = {loop.job(job_id)["runs"][-1]["run_id"] for job_id in first}

    loop.submit("next", at=2_100)
    # Its state lists none of the three runs leased to it: 3 unacknowledged, more than 2.
    loop.report("ex1", 2_500, drop=tuple(runs))
    assert unacknowledged(loop.index, {"ex1"}) == {"ex1": 3}
    lagging = loop.cycle(3_000)
    assert leases(lagging) == {}
    assert {job_id for job_id, _, _ in events(lagging)} == set(), "its leased runs are neither taken back nor ended"

    # Listing one of them leaves 2, not more than the limit (Armada's rule: at most the limit may wait).
    loop.report("ex1", 3_500, drop=tuple(sorted(runs)[1:]))
    assert set(leases(loop.cycle(4_000))) == {"next"}


def test_held_back_names_why_and_counts_only_runs_not_in_the_executors_latest_state() -> None:
    index = SchedulerIndex()
    for i in range(4):
        index.apply(running(delta(f"a{i}"), f"ra{i}", "ex1", "n0", 500))
        index.apply(running(delta(f"b{i}"), f"rb{i}", "ex2", "n0", 500))
    index.apply(executor("ex1", 1_000, runs={"ra0": "a0"}))
    index.apply(executor("ex2", 1_000, runs={f"rb{i}": f"b{i}" for i in range(4)}))
    index.apply(executor("ex3", 1_000))
    index.apply(ExecutorSettings("ex3", True, "disk full", "root", 900, "e1"))
    live = dict(index.executors)

    assert unacknowledged(index, live.keys()) == {"ex1": 3}
    assert held_back(index, live, 2) == {"ex1": "3 leased runs not acknowledged, more than 2", "ex3": "cordoned by root: disk full"}
    assert held_back(index, live, 3) == {"ex3": "cordoned by root: disk full"}
    index.apply(ExecutorSettings("ex3", False, "", "root", 950, "e2"))
    assert held_back(index, live, 3) == {}


def counted_afresh(index: SchedulerIndex) -> Counter[str]:
    """Every busy entry's active run that its executor's latest state does not list: what the kept count must say."""
    counts: Counter[str] = Counter()
    for job_id in index.busy:
        entry = index.jobs[job_id]
        if entry.has_run and entry.expect != END and entry.delta.run_active and entry.delta.executor in index.executors:
            counts[entry.delta.executor or ""] += entry.delta.run_id not in index.executors[entry.delta.executor or ""].runs
    return +counts


ACTIONS = st.sampled_from(["lease", "end", "requeue", "report", "ask"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(ACTIONS, st.integers(0, 11), st.integers(0, 2)), max_size=60))
def test_the_count_kept_from_cycle_to_cycle_is_the_count_made_afresh(steps: list[tuple[str, int, int]]) -> None:
    index = SchedulerIndex()
    names = [f"ex{e}" for e in range(3)]
    for name in names:
        index.apply(executor(name, 1_000))
    runs = 0
    for step, (action, job, which) in enumerate(steps):
        job_id, name = f"j{job}", names[which]
        if action == "lease":
            runs += 1
            index.apply(running(delta(job_id), f"r{runs}", name, "n0", 500, runs=runs))
        elif action == "end" and job_id in index.jobs:
            index.apply(replace(index.jobs[job_id].delta, state="succeeded", run_state="succeeded"))
        elif action == "requeue" and job_id in index.jobs:
            index.apply(replace(index.jobs[job_id].delta, state="queued", run_state="lease_returned"))
        elif action == "report":
            # The executor lists every other run the index holds on it, and one it does not know.
            held = sorted(e.delta.run_id or "" for e in index.jobs.values() if e.has_run and e.delta.executor == name)
            index.apply(executor(name, 1_000 + step, runs={**{run: "?" for run in held[::2]}, "stray": "?"}))
        elif action == "ask":  # a cycle: the changes since the last one are taken in together
            assert unacknowledged(index, names) == counted_afresh(index)
    assert unacknowledged(index, names) == counted_afresh(index)


def test_the_jobs_of_a_cordoned_executor_count_in_their_queues_share_of_the_pool() -> None:
    """As a stale executor's (Armada filters cordoned, lagging and stale executors alike, after counting
    every executor's jobs): queue a runs 64 cpus on cordoned ex1, so queue b takes the 32 cpus of ex2
    before a gets more, and none of a's jobs is preempted though a is far above its share."""
    loop = Loop()
    for i in range(4):
        loop.submit(f"a{i}", cpu="16")
    loop.report("ex1", 1_000)
    assert loop.cycle(2_000).leased == 4
    set_cordon(loop, "ex1", True, 2_100, reason="drain")
    for queue in ("a", "b"):
        loop.submit(f"{queue}-new0", queue=queue, cpu="16", at=3_000)
        loop.submit(f"{queue}-new1", queue=queue, cpu="16", at=3_001)
    loop.report("ex1", 3_500)
    loop.report("ex2", 3_500, nodes(1))
    outcome = loop.cycle(4_000)
    assert set(leases(outcome)) == {"b-new0", "b-new1"}
    assert executors_of(loop, ["b-new0", "b-new1"]) == {"ex2"}
    assert not [kind for job_id, kind, _ in events(outcome) if job_id.startswith("a") and job_id[1].isdigit()]
    [pool] = outcome.records[0]["events"][0]["payload"][1]["pools"]
    shares = {queue["queue"]: queue for queue in pool["queues"]}
    assert shares["a"]["allocation"]["cpu"] == 64 * CPU
