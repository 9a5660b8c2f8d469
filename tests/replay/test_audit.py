"""`streams.replay.audit` over logs the pipeline's own pure parts recorded in memory (tests/kit/recorded.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from schemas.codec import decode, encode
from streams.domain import events
from streams.domain.executor_settings import SETTINGS_JOB_SET, SETTINGS_QUEUE, settings_payload
from streams.domain.ids import new_id
from streams.replay.audit import audit
from streams.replay.cycles import Configurations
from streams.replay.source import EVENTS, FEED
from streams.scheduler import feed
from streams.scheduler.config_file import SchedulerConfiguration, parse
from tests.kit.recorded import Recorder


def busy_log(steps: int = 60, recorder: Recorder | None = None) -> Recorder:
    """Two queues on 32 cpus: a gang, fair-share preemption when the second queue arrives, jobs running and ending."""
    recorder = recorder or Recorder()
    recorder.submit("a", "fill", count=30, cpu="1")
    recorder.submit("a", "gang", count=4, cpu="1", gang=4)
    for i in range(steps):
        if i == 5:
            recorder.submit("b", "late", count=20, cpu="1")
        if i % 7 == 0:
            recorder.submit("a", f"more-{i}", count=3, cpu="2")
        recorder.step()
    return recorder


def recorded_decisions(recorder: Recorder) -> int:
    """The decisions of every cycle record on `events`, decoded."""
    return sum(
        len(event["payload"][1]["decisions"])
        for partition in recorder.log.partitions(EVENTS)
        for record in recorder.log.records(EVENTS, partition)
        for event in decode("event_sequence", record.value)["events"]
        if event["payload"][0].endswith("SchedulingCycle")
    )


def kinds(recorder: Recorder) -> set[str]:
    found = set()
    for partition in recorder.log.partitions(EVENTS):
        for record in recorder.log.records(EVENTS, partition):
            for event in decode("event_sequence", record.value)["events"]:
                found.add(event["payload"][0].rsplit(".", 1)[-1])
    return found


def test_a_faithful_log_matches_every_cycle_and_decision() -> None:
    recorder = busy_log()
    assert {"JobLeased", "JobPreempted", "SchedulingCycle", "JobRunSucceeded"} <= kinds(recorder)
    report = audit(recorder.log, Configurations())
    assert report.ok, report.first
    assert report.cycles == 60 and report.checked == 60
    assert report.deciding > 5 and report.committed_matched == report.deciding
    # Counted off the repeat where the committed cycle matched it: as many as the records on `events` hold.
    assert report.decisions_matched == recorded_decisions(recorder) > 50 and report.events_matched > report.deciding
    assert report.in_flight == 0 and report.republished == 0
    assert report.unknown_configurations == []


def leased_record(recorder: Recorder) -> tuple[int, int, dict]:
    """(partition, offset, sequence) of the first scheduler record on `events` that leases a job."""
    for partition in recorder.log.partitions(EVENTS):
        for record in recorder.log.records(EVENTS, partition):
            sequence = decode("event_sequence", record.value)
            if sequence["user"] == "scheduler" and sequence["events"][0]["payload"][0].endswith("JobLeased"):
                return partition, record.offset, sequence
    raise AssertionError("no lease on the log")


def test_a_lease_changed_on_events_is_caught_with_its_cycle_inputs_and_difference() -> None:
    recorder = busy_log(20)
    partition, offset, sequence = leased_record(recorder)
    sequence["events"][0]["payload"][1]["node"] = "n-elsewhere"
    recorder.log.replace(EVENTS, partition, offset, encode("event_sequence", sequence))
    report = audit(recorder.log, Configurations())
    assert not report.ok
    first = report.first
    assert first is not None and first.what == "a record of the cycle on `events` differs from its repeat"
    assert first.where == f"events[{partition}]@{offset}"
    assert any("JobLeased.node: recorded 'n-elsewhere', replayed 'n" in line for line in first.differences), first.differences
    assert first.cycle_id == sequence["events"][0]["payload"][1]["cycle_id"]
    assert first.inputs[0].startswith("tick at flotilla.scheduler-feed@") and any("job " in line for line in first.inputs)


def test_a_decision_changed_in_a_cycle_record_is_caught() -> None:
    recorder = busy_log(20)
    for partition in recorder.log.partitions(EVENTS):
        for record in recorder.log.records(EVENTS, partition):
            sequence = decode("event_sequence", record.value)
            if sequence["queue"] == "_scheduler":
                decision = sequence["events"][0]["payload"][1]["decisions"][0]
                decision["reason"] = "tampered"
                recorder.log.replace(EVENTS, partition, record.offset, encode("event_sequence", sequence))
                report = audit(recorder.log, Configurations())
                assert report.first is not None and report.divergences == 1
                assert any("decisions[0].reason: recorded 'tampered'" in line for line in report.first.differences)
                return
    raise AssertionError("no cycle record")


def test_a_committed_cycle_changed_on_the_feed_is_caught() -> None:
    recorder = busy_log(10)
    records = list(recorder.log.records(FEED, 0))
    offset, record = next(
        (r.offset, decoded) for r in records if r.value is not None and isinstance(decoded := feed.decode(r.value), feed.Committed)
    )
    assert isinstance(record, feed.Committed)
    shorter = feed.Committed(record.tick, record.cycle_id, record.events[1:], record.commands)
    recorder.log.replace(FEED, 0, offset, feed.encode(shorter))
    report = audit(recorder.log, Configurations())
    assert report.first is not None and report.first.what == "the committed cycle differs from its repeat"
    assert report.first.tick_offset == record.tick
    assert f"events: {len(record.events) - 1} messages recorded, {len(record.events)} replayed" in report.first.differences


def test_a_cycle_decided_under_another_configuration_names_it() -> None:
    """The feed says which configuration decided; replayed with another one, the audit says so."""
    limited = parse({"scheduling": {"maximumPerQueueSchedulingRate": 2, "maximumPerQueueSchedulingBurst": 2}})
    recorder = Recorder(configuration=limited)
    recorder.submit("a", "s", count=10)
    for _ in range(5):
        recorder.step()
    assert audit(recorder.log, Configurations()).ok, "the feed's own configuration is used"
    default = parse({})
    report = audit(recorder.log, Configurations(override=default))
    assert report.first is not None and report.first.what == "the committed cycle differs from its repeat"
    assert report.first.differences[0] == f"the cycle was decided with configuration {limited.hash}, the replay used {default.hash}"


def test_a_log_without_its_configuration_asks_for_it_and_takes_it_given() -> None:
    """A log written before the feed carried the configuration: the audit names the hash to give."""
    limited = parse({"scheduling": {"maximumPerQueueSchedulingRate": 2, "maximumPerQueueSchedulingBurst": 2}})
    recorder = Recorder(configuration=limited, configured=True)
    recorder.submit("a", "s", count=10)
    for _ in range(5):
        recorder.step()
    report = audit(recorder.log, Configurations())
    assert report.first is not None
    assert report.first.differences[0].startswith(
        f"the cycle was decided with configuration {limited.hash} (not known here: give it with --config)"
    )
    assert audit(recorder.log, Configurations(given=[limited])).ok


def cancel_runs(recorder: Recorder) -> int:
    """The cancel_run commands the scheduler committed on the feed."""
    return sum(
        decode("executor_command", value)["kind"] == "cancel_run"
        for record in recorder.log.records(FEED, 0)
        if isinstance(committed := feed.decode(record.value or b""), feed.Committed)
        for _, value in committed.commands
    )


def test_a_log_of_a_release_before_orphans_in_later_reports_audits_with_the_rule_it_was_decided_with() -> None:
    """That release sent a cancel_run for most runs that ended, and recorded its configuration without the setting."""

    def named(configuration: SchedulerConfiguration, resolved: dict[str, Any]) -> SchedulerConfiguration:
        name = "0123456789abcdef"
        return replace(configuration, resolved=resolved, hash=name, cycle=replace(configuration.cycle, config_hash=name))

    before = parse({"orphansInLaterReports": False})
    release = named(before, {name: value for name, value in before.resolved.items() if name != "orphansInLaterReports"})
    old, new = busy_log(recorder=Recorder(configuration=release)), busy_log()
    assert cancel_runs(old) > 10 and cancel_runs(new) == 0
    assert audit(old.log, Configurations()).ok and audit(new.log, Configurations()).ok
    # Repeated with today's rule under the same name, the old log's cancel_runs are not implied.
    report = audit(old.log, Configurations(override=named(parse({}), release.resolved)))
    assert report.first is not None and "commands; the repeated cycle publishes nothing" in report.first.differences[0]


def test_records_missing_from_events_at_the_end_are_in_flight_and_earlier_ones_diverge() -> None:
    recorder = busy_log(12)
    leases = [
        (partition, record.offset)
        for partition in recorder.log.partitions(EVENTS)
        for record in recorder.log.records(EVENTS, partition)
        if decode("event_sequence", record.value)["user"] == "scheduler"
    ]
    # The log's last scheduler record is not there yet: still being published.
    last = max(leases, key=lambda place: recorder.log.topics[(EVENTS, place[0])][place[1]].timestamp)
    del recorder.log.topics[(EVENTS, last[0])][last[1] :]
    report = audit(recorder.log, Configurations())
    assert report.ok and report.in_flight >= 1


def test_since_compares_only_later_cycles() -> None:
    recorder = busy_log(30)
    since = recorder.now - 10_000
    report = audit(recorder.log, Configurations(), since_ms=since)
    assert report.ok, report.first
    assert report.cycles == 30 and 0 < report.checked <= 11


def test_every_generation_of_the_feed_is_audited_after_restarts() -> None:
    recorder = busy_log(15)
    recorder.restart()
    recorder.submit("b", "after-restart", count=6, cpu="2")
    for _ in range(10):
        recorder.step()
    report = audit(recorder.log, Configurations())
    assert report.ok, report.first
    assert report.generations == ["flotilla.scheduler-feed@1", "flotilla.scheduler-feed"]
    assert report.cycles == 25 and report.in_flight == 0


def leased_at(recorder: Recorder) -> list[int]:
    """The time of every lease on `events`."""
    return sorted(
        event["created"]
        for partition in recorder.log.partitions(EVENTS)
        for record in recorder.log.records(EVENTS, partition)
        for event in decode("event_sequence", record.value)["events"]
        if event["payload"][0].endswith("JobLeased")
    )


def set_cordon(recorder: Recorder, cordoned: bool) -> None:
    """An administrator's cordon of the recorder's executor, as the API writes it."""
    event = events.event(new_id(recorder.now, recorder.rng), recorder.now, None, settings_payload(recorder.executor, cordoned, "drain"))
    recorder.publish(SETTINGS_QUEUE, SETTINGS_JOB_SET, "root", [event])


def test_a_log_with_an_executor_cordoned_audits_and_its_cordon_outlives_a_restart() -> None:
    recorder = Recorder()
    recorder.submit("a", "fill", count=40, cpu="1")  # 32 cpus: 8 wait for room
    for _ in range(2):
        recorder.step()
    set_cordon(recorder, True)
    cordoned_at = recorder.now
    for _ in range(8):  # runs end after 3 s, leaving room that the cordon keeps empty
        recorder.step()
    recorder.restart()  # the feed begun anew: the refold of `events` brings the cordon back
    for _ in range(4):
        recorder.step()
    assert recorder.index.cordoned(recorder.executor)
    set_cordon(recorder, False)
    uncordoned_at = recorder.now
    for _ in range(4):
        recorder.step()
    leases = leased_at(recorder)
    assert len(leases) == 40 and leases[31] <= cordoned_at
    assert [at for at in leases if cordoned_at < at <= uncordoned_at] == [], "no lease while cordoned"
    report = audit(recorder.log, Configurations())
    assert report.ok, report.first
    assert report.generations == ["flotilla.scheduler-feed@1", "flotilla.scheduler-feed"] and report.cycles == 18


def test_the_report_reads_as_a_person_expects() -> None:
    from streams.client.commands.replays import audit_lines

    recorder = busy_log(12)
    ok = audit_lines(audit(recorder.log, Configurations()).to_json(), took=2.0)
    assert ok[0].startswith("audit of the recorded log: ") and ok[-1] == "OK: every repeated cycle decided what was recorded"
    partition, offset, sequence = leased_record(recorder)
    sequence["events"][0]["payload"][1]["node"] = "n-elsewhere"
    recorder.log.replace(EVENTS, partition, offset, encode("event_sequence", sequence))
    lines = audit_lines(audit(recorder.log, Configurations()).to_json())
    text = "\n".join(lines)
    assert "DIVERGED: 1 divergence(s); the first:" in text and f"  where: events[{partition}]@{offset}" in text
    assert "  input records:" in text and "  difference:" in text and "recorded 'n-elsewhere'" in text
