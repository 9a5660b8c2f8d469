"""The executor-report agent's choice between forwarding a report in full and as a heartbeat."""

from __future__ import annotations

from streams.agents.executor_reports import FullStates, executor_key


def test_the_first_report_of_each_executor_goes_in_full_then_one_per_interval() -> None:
    full = FullStates(interval_ms=5_000)
    assert full.due("ex1", 1_000)
    full.sent["ex1"] = 1_000
    assert not full.due("ex1", 2_000) and not full.due("ex1", 5_999)
    assert full.due("ex1", 6_000)
    assert full.due("ex2", 2_000)  # another executor is not held back by the first


def test_a_report_older_than_the_last_full_one_is_a_heartbeat() -> None:
    full = FullStates(interval_ms=5_000, sent={"ex1": 10_000})
    assert not full.due("ex1", 9_000)


def test_the_executor_id_is_the_message_key_as_delivered() -> None:
    assert executor_key(b"fake-0") == "fake-0"
    assert executor_key("fake-0") == "fake-0"
    assert executor_key(b"") is None and executor_key(None) is None
