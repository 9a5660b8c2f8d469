"""`flotilla audit`: did the scheduler do what its recorded inputs imply?

Every cycle is repeated from the scheduler feed (`streams.replay.cycles`) and what it decides is
compared twice:

1. with the cycle the scheduler committed on the feed (the `Committed` record it appended before
   publishing: the exact messages for `events` and `executor-commands`), message by message;
2. with `events`, the log of record: each message a repeated cycle publishes must be there, the
   same, and every record the scheduler wrote there must be one a repeated cycle publishes.

Messages are compared as bytes and, where the bytes differ, decoded (a log written in another
framing or by an earlier schema release holds other bytes for the same record). For the second
comparison the records of `events` are read once, partition by partition, alongside the replay:
the scheduler publishes each cycle's messages before it commits the next cycle, so on every
partition its records come in cycle order, and matching them needs no more memory than a few
cycles' messages (plus the ids of recently matched ones, which a worker taking over publishes
again). Only the head of each record is read (`streams.replay.headers`) unless it is the
scheduler's.

A cycle whose messages are missing is a divergence unless no later cycle's messages are on the log
yet (then it is still being published: `in_flight`). The report counts what matched and holds the
first divergence in full: the cycle, its input records and the difference.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from ulid import ULID

from schemas.codec import SchemaError, decode
from streams.archive.segments import Record
from streams.domain.events import sequence_key
from streams.replay.cycles import Configurations, Recorded, Repeated, Skipped, repeat
from streams.replay.diff import differences
from streams.replay.headers import head
from streams.replay.source import EVENTS, LogSource, feed_records
from streams.scheduler import feed
from streams.scheduler.commit import committed as committed_record
from streams.scheduler.cycle import CYCLES_JOB_SET, CYCLES_QUEUE, SCHEDULER_USER

# Ids of matched scheduler records kept to recognise one published again after a take-over.
RECENT_MATCHED = 100_000
# Records of a cycle's window shown with a divergence.
SHOWN_INPUTS = 12

CYCLE_KEY = sequence_key(CYCLES_QUEUE, CYCLES_JOB_SET).encode()

Progress = Callable[[int, int], None]  # (feed records replayed, feed records in all)


@dataclass
class Divergence:
    """Where the log and its replay part: ``what`` in words, the cycle it concerns, where on the
    log, the input records of the cycle and each difference."""

    what: str
    generation: str
    tick_offset: int | None = None
    cycle_id: str | None = None
    cycle_time: int | None = None
    where: str = ""
    differences: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class AuditReport:
    source: str
    generations: list[str] = field(default_factory=list)
    feed_records: int = 0
    cycles: int = 0  # ticks repeated
    checked: int = 0  # cycles compared (all of them, or those at and after --since)
    deciding: int = 0  # compared cycles that published something
    committed_matched: int = 0  # their Committed records matching the repeat
    decisions_matched: int = 0  # decisions of matched cycle records on `events`
    events_matched: int = 0  # the scheduler's event records on `events` matching the repeat
    events_read: int = 0  # records of `events` read
    republished: int = 0  # the scheduler's records found again on `events` (same ids and content)
    in_flight: int = 0  # cycles at the log's end not committed or published yet
    skipped: int = 0  # feed records that are not feed records
    divergences: int = 0
    first: Divergence | None = None
    # Configuration hashes cycles were decided with that no configuration given or on the feed has.
    unknown_configurations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.divergences == 0

    def diverged(self, divergence: Divergence) -> None:
        self.divergences += 1
        if self.first is None:
            self.first = divergence

    def to_json(self) -> dict[str, Any]:
        body = {name: value for name, value in vars(self).items() if name != "first"}
        return {**body, "ok": self.ok, "first_divergence": self.first.to_json() if self.first else None}


@dataclass
class Cycle:
    """A repeated cycle while what it publishes is not all found: enough to describe it."""

    generation: str
    tick_offset: int
    cycle_id: str
    cycle_time: int
    configuration: str
    inputs: list[str]
    decisions: int = 0
    unmatched: int = 0
    seq: int = 0  # its place among the cycles expected on `events`
    # Per cycle record of the repeat (by its event id): its decisions and configuration hash, and
    # whether the committed cycle matched the repeat, when these say what the recorded ones hold
    # (`EventsMatcher.match` then need not decode the recorded record to count them).
    records: dict[str, tuple[int, str]] = field(default_factory=dict)
    faithful: bool = False

    def divergence(self, what: str, where: str = "", found: list[str] | None = None) -> Divergence:
        return Divergence(what, self.generation, self.tick_offset, self.cycle_id, self.cycle_time, where, found or [], self.inputs)


def audit(
    source: LogSource,
    configurations: Configurations,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    progress: Progress | None = None,
) -> AuditReport:
    """Repeat every cycle of every feed generation and compare; cycles whose tick is before
    ``since_ms`` or after ``until_ms`` are repeated (the index needs them) but not compared."""
    generations = source.feed_generations()
    report = AuditReport(source.description, [g.name for g in generations])
    total = sum(g.end for g in generations)
    matcher = EventsMatcher(source, report, since_ms)
    base = 0
    for generation in generations:
        run = Generation(generation.name, base, report, matcher, since_ms, until_ms, configurations.known.keys())
        run.run(feed_records(generation), configurations, progress, total)
        base += generation.end
    matcher.finish()
    known = set(configurations.known)
    report.unknown_configurations = sorted(matcher.configurations - known)
    return report


@dataclass
class Generation:
    name: str
    base: int  # feed records of the generations before
    report: AuditReport
    matcher: EventsMatcher
    since_ms: int | None
    until_ms: int | None
    known_configurations: Collection[str] = ()
    pending: dict[int, tuple[Cycle, feed.Committed]] = field(default_factory=dict)  # tick offset -> what it must commit
    quiet: set[int] = field(default_factory=set)  # ticks whose cycle publishes nothing
    done: dict[int, bytes] = field(default_factory=dict)  # tick offset -> digest of the committed record matched
    last_committed_tick: int = -1

    def run(
        self,
        records: Iterator[tuple[Record, feed.FeedRecord | None]],
        configurations: Configurations,
        progress: Progress | None,
        total: int,
    ) -> None:
        report = self.report
        for step in repeat(self.name, records, configurations, keep_windows=True):
            report.feed_records = self.base + step.offset + 1
            if isinstance(step, Repeated):
                report.cycles += 1
                self.repeated(step)
                if progress is not None and report.cycles % 100 == 0:
                    progress(report.feed_records, total)
            elif isinstance(step, Recorded):
                self.recorded(step)
            elif isinstance(step, Skipped):
                report.skipped += 1
        self.finish()

    def compared(self, tick: feed.Tick) -> bool:
        return (self.since_ms is None or tick.time >= self.since_ms) and (self.until_ms is None or tick.time <= self.until_ms)

    def repeated(self, step: Repeated) -> None:
        report = self.report
        if not self.compared(step.tick):
            return
        report.checked += 1
        commit = committed_record(step.offset, step.outcome)
        if commit is None:
            self.quiet.add(step.offset)
            return
        report.deciding += 1
        cycle = Cycle(self.name, step.offset, step.outcome.cycle_id, step.tick.time, step.configuration.hash, describe_inputs(step))
        for sequence in step.outcome.records:
            (event,) = sequence["events"]
            payload = event["payload"][1]
            cycle.records[event["event_id"]] = (len(payload["decisions"]), payload["config_hash"])
        self.pending[step.offset] = (cycle, commit)

    def recorded(self, step: Recorded) -> None:
        report = self.report
        record = step.committed
        digest = _digest(feed.encode(record))
        where = f"{self.name}@{step.offset} (the committed cycle of the tick at offset {record.tick})"
        if record.tick in self.done:
            if self.done[record.tick] != digest:
                report.diverged(
                    Divergence(
                        "the scheduler committed the cycle a second time, differently", self.name, record.tick, record.cycle_id, where=where
                    )
                )
            return
        expected = self.pending.pop(record.tick, None)
        if expected is None:
            if record.tick in self.quiet:
                self.quiet.discard(record.tick)
                found = [f"recorded: {_count(record)}; the repeated cycle publishes nothing"]
                report.diverged(
                    Divergence(
                        "the scheduler committed decisions its inputs do not imply",
                        self.name,
                        record.tick,
                        record.cycle_id,
                        where=where,
                        differences=found,
                    )
                )
            elif self.compared_offset(record.tick):
                found = [f"recorded: {_count(record)}"]
                report.diverged(
                    Divergence(
                        "the scheduler committed a cycle for a record that is no tick",
                        self.name,
                        record.tick,
                        record.cycle_id,
                        where=where,
                        differences=found,
                    )
                )
            return
        cycle, commit = expected
        self.done[record.tick] = digest
        self.last_committed_tick = max(self.last_committed_tick, record.tick)
        found = compare_committed(record, commit)
        if found:
            decided_with = configuration_of(record)
            if decided_with is not None and decided_with != cycle.configuration:
                hint = "" if decided_with in self.known_configurations else " (not known here: give it with --config)"
                found.insert(0, f"the cycle was decided with configuration {decided_with}{hint}, the replay used {cycle.configuration}")
            report.diverged(cycle.divergence("the committed cycle differs from its repeat", where, found))
        else:
            report.committed_matched += 1
            cycle.faithful = True
        # `events` must hold what the scheduler published, which is what it committed.
        self.matcher.expect(cycle, record.events)

    def compared_offset(self, tick: int) -> bool:
        """Whether a tick at this offset would have been compared: unknown ticks count when no window is set."""
        return self.since_ms is None and self.until_ms is None

    def finish(self) -> None:
        """Cycles that were to publish something and never committed it: still deciding at the log's end, or never."""
        for offset, (cycle, commit) in sorted(self.pending.items()):
            if offset < self.last_committed_tick:
                self.report.diverged(
                    cycle.divergence(
                        "the scheduler never committed this cycle, whose inputs imply decisions", found=[f"replayed: {_count(commit)}"]
                    )
                )
            else:
                self.report.in_flight += 1


class EventsMatcher:
    """The scheduler's records on `events`, matched against what repeated cycles published, one
    partition at a time, each read just far enough ahead (see the module's docstring)."""

    def __init__(self, source: LogSource, report: AuditReport, since_ms: int | None) -> None:
        self.report = report
        self.since_ms = since_ms
        self.readers = {p: source.records(EVENTS, p, since_ms=since_ms) for p in source.partitions(EVENTS)}
        self.held: dict[int, tuple[Record, str]] = {}  # partition -> a scheduler record no cycle expects yet, and its first event id
        self.expected: dict[str, tuple[Cycle, bytes]] = {}  # first event id -> (cycle, value)
        self.recent: OrderedDict[str, bytes] = OrderedDict()  # first event id -> digest of the matched record
        self.cycles = 0
        self.last_matched_seq = -1
        self.configurations: set[str] = set()
        self.kinds: Counter[str] = Counter()

    def expect(self, cycle: Cycle, messages: tuple[tuple[bytes, bytes], ...]) -> None:
        cycle.seq = self.cycles
        self.cycles += 1
        for _, value in messages:
            first = head(value).first_event_id
            if first is not None:
                self.expected[first] = (cycle, value)
                cycle.unmatched += 1
        self.drain()

    def drain(self) -> None:
        for partition in sorted({*self.readers, *self.held}):
            while self.expected and self.advance(partition):
                pass
            if not self.expected:
                return

    def advance(self, partition: int) -> bool:
        """One record further on ``partition``; False when it can go no further for now (a record
        held for a later cycle, or the partition's end)."""
        held = self.held.pop(partition, None)
        if held is not None:
            if held[1] not in self.expected:
                self.held[partition] = held
                return False
            self.match(*held)
            return True
        reader = self.readers.get(partition)
        record = None if reader is None else next(reader, None)
        if record is None:
            self.readers.pop(partition, None)
            return False
        first = self.scheduler_record(record)
        if first is not None:
            if first in self.expected:
                self.match(record, first)
            elif not self.known(record, first):
                self.held[partition] = (record, first)
                return False
        return True

    def scheduler_record(self, record: Record) -> str | None:
        """The first event id of a record the scheduler wrote; None for any other record."""
        self.report.events_read += 1
        if record.value is None:
            return None
        try:
            found = head(record.value)
        except SchemaError:
            return None  # the job-state fold skips it too
        if found.user != SCHEDULER_USER or found.first_event_id is None:
            return None
        return found.first_event_id

    def known(self, record: Record, first: str) -> bool:
        """A record matched before (published again), or one of a cycle before the audited window: nothing to match."""
        digest = self.recent.get(first)
        if digest is not None:
            if digest == _digest(record.value or b""):
                self.report.republished += 1
            else:
                where = f"events[{record.partition}]@{record.offset}"
                self.report.diverged(Divergence("a second, different record with the event ids of one already matched", "", where=where))
            return True
        return self.since_ms is not None and _id_time(first) < self.since_ms

    def match(self, record: Record, first: str) -> None:
        cycle, value = self.expected.pop(first)
        cycle.unmatched -= 1
        self.last_matched_seq = max(self.last_matched_seq, cycle.seq)
        self.recent[first] = _digest(record.value or b"")
        if len(self.recent) > RECENT_MATCHED:
            self.recent.popitem(last=False)
        where = f"events[{record.partition}]@{record.offset}"
        found = compare_message("event_sequence", record.value or b"", value)
        if found:
            self.report.diverged(cycle.divergence("a record of the cycle on `events` differs from its repeat", where, found))
            return
        self.report.events_matched += 1
        if head(value).queue != CYCLES_QUEUE:
            return
        # The record equals the committed one, which equals the repeat's when the cycle is faithful.
        counted = cycle.records.get(first) if cycle.faithful else None
        if counted is not None:
            decisions, config_hash = counted
            self.report.decisions_matched += decisions
            if config_hash:
                self.configurations.add(config_hash)
            return
        for event in decode("event_sequence", value)["events"]:
            payload = event["payload"][1]
            self.report.decisions_matched += len(payload.get("decisions", ()))
            if payload.get("config_hash"):
                self.configurations.add(payload["config_hash"])

    def finish(self) -> None:
        """Read every partition to its end: scheduler records no cycle published diverge; what
        cycles published and `events` lacks diverges, unless it is still being published."""
        for partition in sorted({*self.readers, *self.held}):
            held = self.held.pop(partition, None)
            rest = self.readers.pop(partition, iter(()))
            for record, first in _chain(held, rest, self):
                if first in self.expected:
                    self.match(record, first)
                elif not self.known(record, first):
                    where = f"events[{record.partition}]@{record.offset}"
                    shown = _decoded_lines(record.value)
                    self.report.diverged(
                        Divergence("a scheduler record on `events` that no repeated cycle publishes", "", where=where, differences=shown)
                    )
        missing: dict[int, tuple[Cycle, int]] = {}
        for cycle, _ in self.expected.values():
            missing[cycle.seq] = (cycle, missing.get(cycle.seq, (cycle, 0))[1] + 1)
        for seq, (cycle, count) in sorted(missing.items()):
            if seq < self.last_matched_seq:
                found = [f"{count} of its records are not on `events`, while later cycles' are"]
                self.report.diverged(cycle.divergence("the scheduler committed this cycle but `events` lacks its records", found=found))
            else:
                self.report.in_flight += 1


def _chain(held: tuple[Record, str] | None, rest: Iterator[Record], matcher: EventsMatcher) -> Iterator[tuple[Record, str]]:
    if held is not None:
        yield held
    for record in rest:
        first = matcher.scheduler_record(record)
        if first is not None:
            yield record, first


def compare_committed(recorded: feed.Committed, replayed: feed.Committed) -> list[str]:
    """The differences between the committed cycle and its repeat, message by message."""
    found: list[str] = []
    if recorded.cycle_id != replayed.cycle_id:
        found.append(f"cycle_id: recorded {recorded.cycle_id}, replayed {replayed.cycle_id}")
    for what, schema, a, b in (
        ("events", "event_sequence", recorded.events, replayed.events),
        ("commands", "executor_command", recorded.commands, replayed.commands),
    ):
        if len(a) != len(b):
            found.append(f"{what}: {len(a)} messages recorded, {len(b)} replayed")
        for i, ((key_a, value_a), (key_b, value_b)) in enumerate(zip(a, b, strict=False)):
            if key_a != key_b:
                found.append(f"{what}[{i}] key: recorded {key_a!r}, replayed {key_b!r}")
            found += [f"{what}[{i}].{line}" for line in compare_message(schema, value_a, value_b)]
    return found


def configuration_of(record: feed.Committed) -> str | None:
    """The configuration hash the committed cycle's record names."""
    for key, value in record.events:
        if key == CYCLE_KEY:
            try:
                return str(decode("event_sequence", value)["events"][0]["payload"][1].get("config_hash") or "") or None
            except (SchemaError, IndexError, KeyError):
                return None
    return None


def compare_message(schema: str, recorded: bytes, replayed: bytes) -> list[str]:
    """The differences between two encoded messages: none when their bytes, or else their decoded records, are equal."""
    if recorded == replayed:
        return []
    try:
        return differences(decode(schema, recorded), decode(schema, replayed))
    except SchemaError as exc:
        return [f"cannot be compared: {exc}"]


def describe_inputs(step: Repeated) -> list[str]:
    """The cycle's inputs in a few lines: its tick, the index it ran over, the records folded since the previous tick."""
    tick = step.tick
    queues = ", ".join(f"{q.name} (weight {q.weight:g}{', cordoned' if q.cordoned else ''})" for q in tick.queues) or "none"
    index = step.index
    lines = [
        f"tick at {step.generation}@{step.offset}: time {tick.time}, queues {queues}, owner {tick.owner or '-'}",
        f"index before the cycle: {len(index.jobs)} unfinished jobs, executors {', '.join(sorted(index.executors)) or 'none'}",
        f"configuration {step.configuration.hash}; {len(step.window)} feed records since the previous tick"
        + (f", the first {SHOWN_INPUTS}:" if len(step.window) > SHOWN_INPUTS else ":"),
    ]
    lines += [f"  @{offset} {describe_record(record)}" for offset, record in step.window[:SHOWN_INPUTS]]
    return lines


def describe_record(record: feed.FeedRecord) -> str:
    if isinstance(record, feed.JobDelta):
        run = f", run {record.run_id} on {record.executor}/{record.node} {record.run_state}" if record.run_id else ""
        flags = "".join(f", {name}" for name in ("cancel_requested", "preempt_requested") if getattr(record, name))
        return f"job {record.job_id} ({record.queue}/{record.job_set_id}) {record.state}, class {record.priority_class}{run}{flags}"
    if isinstance(record, feed.Changes):
        return (
            f"{len(record.records)} changes: "
            + "; ".join(describe_record(r) for r in record.records[:3])
            + ("; ..." if len(record.records) > 3 else "")
        )
    if isinstance(record, feed.ExecutorState):
        return (
            f"executor {record.executor} (pool {record.pool}) at {record.time}: {len(record.nodes)} nodes, {len(record.active)} active runs"
        )
    if isinstance(record, feed.Heartbeat):
        return f"heartbeat of executor {record.executor} at {record.time}"
    if isinstance(record, feed.JobSetAction):
        return f"{record.action} job set {record.queue}/{record.job_set_id}" + (
            f" to priority {record.new_priority:g}" if record.new_priority is not None else ""
        )
    if isinstance(record, feed.Configuration):
        return f"configuration {record.hash}"
    return type(record).__name__


def _count(record: feed.Committed) -> str:
    return f"{len(record.events)} event messages, {len(record.commands)} commands"


def _decoded_lines(value: bytes | None) -> list[str]:
    try:
        sequence = decode("event_sequence", value)
    except SchemaError as exc:
        return [str(exc)]
    return [
        f"{event['job_id'] or '-'}: {event['payload'][0].rsplit('.', 1)[-1]} {event['payload'][1]}"[:300]
        for event in sequence["events"][:5]
    ]


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()


def _id_time(event_id: str) -> int:
    """The time in a ULID event id (ms); 0 for an id that is no ULID."""
    try:
        return int(ULID.from_str(event_id).milliseconds)
    except ValueError:
        return 0
