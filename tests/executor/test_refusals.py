"""Leases an executor refuses at once: a run id it holds for another job, a job it reported finished.

The refusals run in front of the real backends (fake, and local for runs found at start), and
what they report goes through the executor's event mapping into the control plane's real fold
and scheduling cycle (``tests.kit.loop``), which must requeue the job at once.
"""

from __future__ import annotations

import random
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from executor.backend import Lease, RunStatus
from executor.backends.fake import EXIT_CODE_ANNOTATION, OUTCOME_ANNOTATION, RUNTIME_ANNOTATION, FakeBackend
from executor.backends.local.backend import LocalBackend
from executor.backends.local.rundir import LEASE, RESULT, RunDir
from executor.cluster import RuntimeDistribution, uniform_nodes
from executor.events import Change, event_sequences, run_payloads
from executor.refusals import ENDS_THE_JOB, JOB_FINISHED, RUN_ID_IN_USE, RefusingBackend
from executor.runtime import Executor
from streams.config import Settings
from streams.domain.ids import new_id, run_id_for
from tests.executor.builders import job_spec, lease
from tests.executor.driving import Clock, run
from tests.kit.loop import Loop, events, kinds, leases
from tests.kit.scheduler import nodes

NODES = uniform_nodes(2, "node", "32", "256Gi")


class Guarded:
    """A fake backend on a hand-driven clock behind the refusals, with every change reported."""

    def __init__(self, memory: int = 1_000) -> None:
        self.clock = Clock(now=100.0)
        self.fake = FakeBackend(NODES, RuntimeDistribution(min_s=1, max_s=1, seed=1, startup_s=0.5), clock=self.clock)
        self.backend = RefusingBackend(self.fake, memory=memory)
        self.changes: list[RunStatus] = []
        run(self.backend.start(self.changes.append))

    def launch(self, leased: Lease) -> list[RunStatus]:
        """What launching ``leased`` reported at once."""
        before = len(self.changes)
        run(self.backend.launch(leased))
        return self.changes[before:]

    def at(self, now: float) -> Guarded:
        self.clock.now = now
        self.fake.advance()
        return self

    def held(self) -> dict[str, tuple[str, str]]:
        return {s.run_id: (s.job_id, s.state) for s in self.backend.runs()}


def of(job_id: str, run_id: str, **annotations: str) -> Lease:
    return replace(lease(job_spec(annotations=annotations), node="node-0", run_id=run_id), job_id=job_id)


def test_a_lease_whose_run_id_is_held_for_another_job_is_returned_at_once() -> None:
    g = Guarded()
    g.launch(of("A", "R"))

    [refused] = g.launch(of("B", "R"))

    assert (refused.run_id, refused.job_id, refused.state, refused.reason) == ("R", "B", "returned", RUN_ID_IN_USE)
    assert refused.message == "this executor already holds run R for job A"
    assert g.held() == {"R": ("A", "pending")}, "A's run goes on and B's is not held"
    [(kind, payload)] = run_payloads(refused)
    assert kind == "flotilla.JobRunFailed"
    assert (payload["run_id"], payload["category"], payload["retryable"], payload["reason"]) == ("R", "lease_returned", True, RUN_ID_IN_USE)


@pytest.mark.parametrize(("annotations", "ended"), [({}, "succeeded"), ({EXIT_CODE_ANNOTATION: "3"}, "failed")])
def test_a_lease_for_a_job_this_executor_reported_finished_is_returned_at_once(annotations: dict[str, str], ended: str) -> None:
    g = Guarded()
    g.launch(of("J", "J-1", **annotations))
    g.at(100.5).at(101.5)
    assert g.changes[-1].state == ended

    [refused] = g.launch(of("J", "J-2"))

    assert (refused.run_id, refused.job_id, refused.state, refused.reason) == ("J-2", "J", "returned", JOB_FINISHED)
    assert refused.message == "this executor already reported job J finished, by run J-1"
    assert "J-2" not in g.held()


def test_a_repeated_lease_is_no_refusal_even_after_its_run_ended() -> None:
    g = Guarded()
    g.launch(of("J", "J-1"))
    assert g.launch(of("J", "J-1")) == []
    g.at(100.5).at(101.5)
    assert g.launch(of("J", "J-1")) == [], "a replayed lease of the run that finished the job"
    assert g.held() == {"J-1": ("J", "succeeded")}


@pytest.mark.parametrize("ending", ["returned", "cancelled", "preempted"])
def test_a_job_whose_run_ended_without_ending_the_job_may_run_again(ending: str) -> None:
    """A returned lease, or an orphan run stopped, leaves the job to the control plane, which may lease it here again."""
    g = Guarded()
    if ending == "returned":
        g.launch(of("J", "J-1", **{OUTCOME_ANNOTATION: "returned"}))
        g.at(101)
    else:
        g.launch(of("J", "J-1", **{RUNTIME_ANNOTATION: "60"}))
        run(g.backend.kill("J-1", 1, ending))
    assert g.changes[-1].state == ending

    assert [(s.run_id, s.state) for s in g.launch(of("J", "J-2"))] == [("J-2", "pending")]


def test_only_the_states_that_report_the_jobs_end_make_it_finished() -> None:
    ending = {
        state
        for state in ("succeeded", "failed", "returned", "cancelled", "preempted")
        if {"flotilla.JobSucceeded", "flotilla.JobFailed"} & {kind for kind, _ in run_payloads(RunStatus("r", "j", "q", "s", "n", state))}
    }
    assert ending == ENDS_THE_JOB


def test_what_the_executor_remembers_is_bounded() -> None:
    g = Guarded(memory=2)
    for run_id in ("R1", "R2", "R3"):
        g.launch(of(f"job-of-{run_id}", run_id))
    assert g.launch(of("other", "R2"))[0].reason == RUN_ID_IN_USE
    assert g.backend.refusal(of("other", "R1")) is None, "the oldest run is forgotten"


def test_runs_a_restarted_executor_finds_are_remembered(tmp_path: Path) -> None:
    """The local backend adopts run directories from an earlier executor: J's run finished the
    job, K's was interrupted while launching (returned), which leaves K to the control plane."""
    runs = tmp_path / "runs"
    for leased, result in [(of("J", "J-1"), {"exit_code": 0}), (of("K", "K-1"), None)]:
        run_dir = RunDir(runs / leased.run_id)
        run_dir.path.mkdir(parents=True)
        run_dir.write_json(LEASE, {**asdict(leased), "node": "local-0"})
        if result is not None:
            run_dir.write_json(RESULT, result)
    local = LocalBackend(tmp_path, uniform_nodes(1, "local", "4", "8Gi"), poll_interval_s=60)
    backend = RefusingBackend(local)
    changes: list[RunStatus] = []

    async def scenario() -> list[RunStatus]:
        found = await backend.start(changes.append)
        await backend.launch(of("J", "J-2"))
        await backend.launch(of("L", "J-1"))
        await backend.launch(of("K", "K-2"))  # reaches the backend, which has no node-0
        await backend.stop()
        return found

    found = run(scenario())

    assert {(s.run_id, s.state) for s in found} == {("J-1", "succeeded"), ("K-1", "returned")}
    assert [(s.run_id, s.job_id, s.reason) for s in changes] == [
        ("J-2", "J", JOB_FINISHED),
        ("J-1", "L", RUN_ID_IN_USE),
        ("K-2", "K", "unknown_node"),
    ]
    assert not (runs / "J-2").exists()


def test_every_executor_puts_its_backend_behind_the_refusals() -> None:
    fake = FakeBackend(NODES, pool="gpus")
    executor = Executor(Settings(), "ex1", fake)
    assert isinstance(executor.backend, RefusingBackend) and executor.backend.inner is fake
    assert executor.backend.pool == "gpus"


def test_the_control_plane_requeues_a_job_whose_lease_was_refused_at_once() -> None:
    """Issue 21: B's lease named a run id the executor held for A. Refused at once, B is requeued
    by the next cycle, on another node, instead of waiting for the lease check to give up."""
    loop = Loop()
    loop.submit("A", cpu="32", at=1_000)
    loop.submit("B", cpu="32", at=1_001)
    loop.report("ex1", 1_500, nodes(3))
    first = loop.cycle(2_000)
    assert set(leases(first)) == {"A", "B"}
    b_lease = next(c for c in loop.commands if c["kind"] == "lease" and c["job_id"] == "B")
    g = Guarded()
    g.launch(of("A", b_lease["run_id"]))  # as if an older control plane had leased the id to A

    refused = g.launch(Lease(b_lease["job_id"], b_lease["run_id"], b_lease["queue"], b_lease["job_set_id"], b_lease["node"], {}))
    rng = random.Random(1)
    for _, sequence in event_sequences([Change(s, 2_100) for s in refused], "ex1", lambda ms: new_id(ms, rng)):
        loop.publish(sequence)

    assert loop.job("B")["runs"][-1]["state"] == "lease_returned"
    loop.report("ex1", 2_500, nodes(3))
    again = loop.cycle(3_000)
    assert kinds(again, "B") == ["JobRequeued", "JobLeased"]
    [requeued] = [p for j, kind, p in events(again) if j == "B" and kind == "JobRequeued"]
    assert requeued["avoid_nodes"] == [f"ex1/{b_lease['node']}"]
    assert leases(again)["B"]["run_id"] == run_id_for("B", 2) and leases(again)["B"]["node"] != b_lease["node"]
