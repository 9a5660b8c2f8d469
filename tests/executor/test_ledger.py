"""The run book the local and fake backends share: real changes only, final ends, timed forgetting."""

from __future__ import annotations

from executor.backend import RunStatus
from executor.backends.ledger import RunLedger
from tests.executor.driving import Clock


def run(state: str, run_id: str = "r1") -> RunStatus:
    return RunStatus(run_id, "j1", "q", "s", "n", state)


def test_only_changes_are_reported_and_an_end_is_final() -> None:
    seen: list[str] = []
    ledger = RunLedger(Clock())
    ledger.on_change = lambda s: seen.append(s.state)
    for state in ["pending", "pending", "running", "succeeded", "running", "failed"]:
        ledger.record(run(state))
    assert seen == ["pending", "running", "succeeded"]
    final = ledger.get("r1")
    assert final is not None and final.state == "succeeded"


def test_ended_runs_are_held_for_the_retention_then_forgotten() -> None:
    clock = Clock()
    forgotten: list[str] = []
    ledger = RunLedger(clock, retention_s=60, on_forget=forgotten.append)
    ledger.record(run("running", "active"))
    ledger.record(run("succeeded", "early"))
    clock.now = 30
    ledger.record(run("failed", "late"))
    clock.now = 59.9
    assert {r.run_id for r in ledger.runs()} == {"active", "early", "late"}
    clock.now = 60
    assert {r.run_id for r in ledger.runs()} == {"active", "late"}
    clock.now = 1000
    assert [r.run_id for r in ledger.runs()] == ["active"]
    assert forgotten == ["early", "late"]


def test_runs_found_at_start_can_be_recorded_silently() -> None:
    seen: list[RunStatus] = []
    ledger = RunLedger(Clock())
    ledger.on_change = seen.append
    ledger.record(run("running"), notify=False)
    assert seen == [] and "r1" in ledger
