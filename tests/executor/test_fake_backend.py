"""The fake backend: simulated run times, outcomes from annotations, one timer heap for all runs."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from executor.backend import RunStatus
from executor.backends.fake import EXIT_CODE_ANNOTATION, OUTCOME_ANNOTATION, RUNTIME_ANNOTATION, FakeBackend
from executor.cluster import RuntimeDistribution, uniform_nodes
from tests.executor.builders import job_spec, lease
from tests.executor.driving import Clock, run

NODES = uniform_nodes(4, "node", "32", "256Gi")


class Simulation:
    """A fake backend on a hand-driven clock, with every change it reported."""

    def __init__(self, runtime: RuntimeDistribution = RuntimeDistribution(min_s=1, max_s=5, seed=1, startup_s=0.5)) -> None:
        self.clock = Clock(now=100.0)
        self.changes: list[RunStatus] = []
        self.backend = FakeBackend(NODES, runtime, clock=self.clock)
        self.backend._ledger.on_change = self.changes.append

    def at(self, now: float) -> Simulation:
        self.clock.now = now
        self.backend.advance()
        return self

    def state(self, run_id: str) -> str | None:
        found = [r for r in self.backend.runs() if r.run_id == run_id]
        return found[0].state if found else None

    def history(self, run_id: str) -> list[str]:
        return [c.state for c in self.changes if c.run_id == run_id]


def annotated(**annotations: str) -> dict[str, object]:
    return job_spec(annotations=annotations)


def test_a_run_is_pending_then_running_then_ends_after_its_annotated_runtime() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "2.5"}))
    run(sim.backend.launch(leased))
    assert sim.state(leased.run_id) == "pending"
    assert sim.at(100.49).state(leased.run_id) == "pending"
    assert sim.at(100.5).state(leased.run_id) == "running"
    assert sim.at(102.99).state(leased.run_id) == "running"
    assert sim.at(103.0).state(leased.run_id) == "succeeded"
    assert sim.history(leased.run_id) == ["pending", "running", "succeeded"]
    assert sim.changes[-1].exit_code == 0


def test_the_exit_code_annotation_fails_the_run() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "1", EXIT_CODE_ANNOTATION: "3"}))
    run(sim.backend.launch(leased))
    sim.at(100.5).at(101.5)
    ended = sim.changes[-1]
    assert (ended.state, ended.exit_code, ended.reason) == ("failed", 3, "exit code 3")


def test_a_returned_outcome_never_starts() -> None:
    sim = Simulation()
    leased = lease(annotated(**{OUTCOME_ANNOTATION: "returned"}))
    run(sim.backend.launch(leased))
    sim.at(200)
    assert sim.history(leased.run_id) == ["pending", "returned"]
    assert sim.changes[-1].reason == "lease_returned"


def test_bad_annotations_fail_the_run_with_the_reason() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "soon"}))
    run(sim.backend.launch(leased))
    assert sim.history(leased.run_id) == ["failed"]
    assert "fake-runtime-seconds is not a number: 'soon'" in sim.changes[-1].message


def test_run_times_are_drawn_reproducibly_per_run_id() -> None:
    def runtime(run_id: str, seed: int) -> float:
        sim = Simulation(RuntimeDistribution(min_s=1, max_s=5, seed=seed, startup_s=0))
        run(sim.backend.launch(lease(run_id=run_id)))
        sim.at(100)  # running from 100
        step = 0.01
        while sim.state(run_id) == "running":
            sim.at(sim.clock.now + step)
        return round(sim.clock.now - 100, 2)

    first = runtime("run-x", seed=1)
    assert 1 <= first <= 5.01
    assert runtime("run-x", seed=1) == first
    assert len({runtime(f"run-{i}", seed=1) for i in range(5)}) > 1


def test_the_active_deadline_fails_a_longer_run_at_the_deadline() -> None:
    sim = Simulation()
    leased = lease(job_spec(annotations={RUNTIME_ANNOTATION: "100"}, active_deadline_seconds=10))
    run(sim.backend.launch(leased))
    assert sim.at(110.49).state(leased.run_id) == "running"
    assert sim.at(110.5).state(leased.run_id) == "failed"
    assert sim.changes[-1].reason == "deadline_exceeded"


def test_kill_ends_a_run_with_the_outcome_and_its_timers_are_dropped() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "5"}))
    run(sim.backend.launch(leased))
    sim.at(101)
    run(sim.backend.kill(leased.run_id, 30, "preempted"))
    run(sim.backend.kill(leased.run_id, 30, "cancelled"))  # already ended: nothing
    run(sim.backend.kill("never-heard-of", 30, "cancelled"))
    sim.at(200)
    assert sim.history(leased.run_id) == ["pending", "running", "preempted"]


def test_a_replayed_lease_starts_nothing_and_an_unknown_node_returns_it() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "1"}))
    run(sim.backend.launch(leased))
    sim.at(102)
    run(sim.backend.launch(leased))
    sim.at(200)
    assert sim.history(leased.run_id) == ["pending", "running", "succeeded"]
    stray = lease(node="node-99")
    run(sim.backend.launch(stray))
    assert sim.history(stray.run_id) == ["returned"]
    assert "node-99" in sim.changes[-1].message


def test_ended_runs_stay_in_reports_for_a_minute() -> None:
    sim = Simulation()
    leased = lease(annotated(**{RUNTIME_ANNOTATION: "1"}))
    run(sim.backend.launch(leased))
    sim.at(101.5)
    assert sim.state(leased.run_id) == "succeeded"
    assert sim.at(161.49).state(leased.run_id) == "succeeded"
    assert sim.at(161.5).state(leased.run_id) is None


def test_ten_thousand_runs_complete_quickly_in_real_time() -> None:
    async def scenario() -> tuple[float, dict[str, list[str]]]:
        backend = FakeBackend(uniform_nodes(1000, "node", "32", "256Gi"), RuntimeDistribution(0.1, 0.5, seed=7, startup_s=0.05))
        history: dict[str, list[str]] = defaultdict(list)
        await backend.start(lambda status: history[status.run_id].append(status.state))
        spec = job_spec()
        started = time.monotonic()
        for i in range(10_000):
            await backend.launch(lease(spec, node=f"node-{i % 1000}", run_id=f"bulk-{i}"))
        while any(states[-1] != "succeeded" for states in history.values()):
            await asyncio.sleep(0.05)
            assert time.monotonic() - started < 20, "10,000 fake runs did not finish within 20 s"
        await backend.stop()
        return time.monotonic() - started, history

    elapsed, history = asyncio.run(scenario())
    assert len(history) == 10_000
    assert all(states == ["pending", "running", "succeeded"] for states in history.values())
    assert elapsed < 5
