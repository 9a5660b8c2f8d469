"""A log recorded in memory by the pipeline's own pure parts, for the replay commands' unit tests.

`Recorder` plays the agents in the order the worker runs them, over `MemoryLog` topics: ingest
appends submissions to `events` (partitioned by key), the job-state fold (`streams.scheduler.fold`)
folds them and appends its deltas to the scheduler feed, an executor reports its nodes and runs,
the scheduler folds the feed into its index and at each tick runs a cycle, appends the `Committed`
record and publishes its messages on `events`, and the executor starts and finishes the runs it was
leased. What it leaves in `MemoryLog` is what a broker would hold; `MemoryLog` answers as a
`streams.replay.source.LogSource`.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from schemas.codec import decode, encode
from streams.archive.segments import Record
from streams.domain import events
from streams.domain.ids import new_id
from streams.domain.validation import SubmitPolicy, validate_item
from streams.replay.source import EVENTS, FEED, FeedGeneration, LogUnavailable
from streams.scheduler import feed
from streams.scheduler.commit import committed
from streams.scheduler.config_file import SchedulerConfiguration, parse
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.feed import NodeState, QueueInfo
from streams.scheduler.fold import Forwarded, apply_sequence, feed_records, message_rng
from streams.scheduler.index import SchedulerIndex
from tests.kit.jobs import container, item
from tests.kit.quantities import CPU, GI
from tests.kit.stores import dict_jobs, settle

PREFIX = "flotilla."


@dataclass
class MemoryLog:
    partitions_of: dict[str, int] = field(default_factory=lambda: {EVENTS: 2, FEED: 1, "queues": 1})
    topics: dict[tuple[str, int], list[Record]] = field(default_factory=dict)
    description: str = "the recorded log"
    # Feeds of earlier generations, oldest first (`Recorder.restart`).
    sealed: list[list[Record]] = field(default_factory=list)

    def append(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, partition: int | None = None) -> Record:
        if partition is None:
            partition = zlib.crc32(key or b"") % self.partitions_of[topic]
        records = self.topics.setdefault((topic, partition), [])
        record = Record(PREFIX + topic, partition, len(records), timestamp, key, value)
        records.append(record)
        return record

    def partitions(self, topic: str) -> list[int]:
        if topic not in self.partitions_of:
            raise LogUnavailable(f"{self.description} has no topic {topic}")
        return list(range(self.partitions_of[topic]))

    def records(
        self, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[Record]:
        for record in self.topics.get((topic, partition), [])[from_offset:]:
            if (since_ms is None or record.timestamp >= since_ms) and (until_ms is None or record.timestamp <= until_ms):
                yield record

    def feed_generations(self) -> list[FeedGeneration]:
        feeds = [*self.sealed, self.topics.get((FEED, 0), [])]
        names = [f"{PREFIX}{FEED}@{n}" for n in range(1, len(feeds))] + [PREFIX + FEED]
        return [FeedGeneration(name, len(records), _reader(records)) for name, records in zip(names, feeds, strict=True)]

    def replace(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        """Tamper with a record: the same place on the log, another value."""
        records = self.topics[(topic, partition)]
        records[offset] = replace(records[offset], value=value)


def _reader(records: list[Record]) -> Callable[[], Iterator[Record]]:
    return lambda: iter(list(records))


@dataclass
class Recorder:
    log: MemoryLog = field(default_factory=MemoryLog)
    configuration: SchedulerConfiguration = field(default_factory=lambda: parse({}))
    now: int = 1_700_000_000_000
    nodes: tuple[NodeState, ...] = tuple(NodeState(f"n{i}", {"cpu": 8 * CPU, "memory": 64 * GI}) for i in range(4))
    executor: str = "ex1"
    run_ms: int = 3_000
    queues: tuple[QueueInfo, ...] = (QueueInfo("a", 1.0), QueueInfo("b", 1.0))
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    jobs: Any = field(default_factory=dict_jobs)
    index: SchedulerIndex = field(default_factory=SchedulerIndex)
    folded: dict[int, int] = field(default_factory=dict)  # events partition -> next offset to fold
    scheduled: int = 0  # next feed offset the scheduler reads
    # The executor: run id -> (job id, queue, job set, node) of each run it holds, and when each started running.
    runs: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    full_state_ms: int = 5_000
    reported_in_full: int | None = None
    configured: bool = False

    # -- ingest -------------------------------------------------------------------------------
    def submit(self, queue: str, job_set: str, count: int = 1, cpu: str = "1", pc: str = "armada-preemptible", gang: int = 0) -> list[str]:
        gang_id = new_id(self.now, self.rng) if gang else None
        annotations = {"armadaproject.io/gangId": gang_id, "armadaproject.io/gangCardinality": str(count)} if gang_id else {}
        payload, reason = validate_item(
            item(annotations=annotations, pod_spec__priority_class_name=pc, pod_spec__containers=[container(cpu=cpu, memory="1Gi")]),
            SubmitPolicy(),
        )
        assert reason is None and payload is not None, reason
        jobs = []
        for _ in range(count):
            job_id = new_id(self.now, self.rng)
            jobs.append(events.event(new_id(self.now, self.rng), self.now, job_id, events.payload("JobSubmitted", payload)))
        self.publish(queue, job_set, "alice", jobs)
        return [event["job_id"] for event in jobs]

    def publish(self, queue: str, job_set: str, user: str, batch: list[dict[str, Any]]) -> None:
        for sequence in events.sequences(queue, job_set, user, (), batch):
            self.log.append(EVENTS, events.sequence_key(queue, job_set).encode(), encode("event_sequence", sequence), self.now)

    # -- the job-state fold -------------------------------------------------------------------
    def fold(self) -> None:
        forwarded: list[Forwarded] = []
        for partition in self.log.partitions(EVENTS):
            for record in self.log.records(EVENTS, partition, from_offset=self.folded.get(partition, 0)):
                sequence = decode("event_sequence", record.value)
                forwarded += apply_sequence(self.jobs, sequence, message_rng(record.topic, partition, record.offset), partition).feed
                self.folded[partition] = record.offset + 1
        settle(self.jobs)
        for changes in feed_records(forwarded):
            self.log.append(FEED, None, feed.encode(changes), self.now)

    # -- the executor -------------------------------------------------------------------------
    def report(self) -> None:
        """Its nodes and runs in full every `full_state_ms`, a heartbeat in between (as the executor-report agent forwards them)."""
        if self.reported_in_full is not None and self.now - self.reported_in_full < self.full_state_ms:
            self.log.append(FEED, None, feed.encode(feed.Heartbeat(self.executor, self.now)), self.now)
            return
        held = {run_id: run[0] for run_id, run in sorted(self.runs.items())}
        state = feed.ExecutorState(self.executor, "default", self.now, self.nodes, held, tuple(held))
        self.log.append(FEED, None, feed.encode(state), self.now)
        self.reported_in_full = self.now

    def run(self) -> None:
        """Start the runs it was leased; finish those that ran ``run_ms``, as an executor reports them."""
        by_set: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for run_id, (job_id, queue, job_set, node) in list(self.runs.items()):
            started = self.started.get(run_id)
            if started is None:
                self.started[run_id] = self.now
                bodies = [events.payload("JobRunRunning", {"run_id": run_id, "node": node})]
            elif self.now - started >= self.run_ms:
                bodies = [events.payload(kind, {"run_id": run_id}) for kind in ("JobRunSucceeded", "JobSucceeded")]
                del self.runs[run_id], self.started[run_id]
            else:
                continue
            by_set.setdefault((queue, job_set), []).extend(
                events.event(new_id(self.now, self.rng), self.now, job_id, body) for body in bodies
            )
        for (queue, job_set), batch in sorted(by_set.items()):
            self.publish(queue, job_set, self.executor, batch)

    # -- the scheduler ------------------------------------------------------------------------
    def tick(self) -> None:
        if not self.configured:
            configuration = feed.Configuration(self.configuration.hash, self.configuration.resolved)
            self.log.append(FEED, None, feed.encode(configuration), self.now)
            self.configured = True
        self.log.append(FEED, None, feed.encode(feed.Tick(self.now, self.queues, owner="recorder")), self.now)
        self.schedule()

    def schedule(self) -> None:
        for record in self.log.records(FEED, 0, from_offset=self.scheduled):
            self.scheduled = record.offset + 1
            decoded = feed.decode(record.value or b"")
            if isinstance(decoded, feed.Tick):
                outcome = run_cycle(self.index, decoded, record.offset, self.configuration.cycle)
                commit = committed(record.offset, outcome)
                if commit is not None:
                    self.log.append(FEED, None, feed.encode(commit), self.now)
                    for key, value in commit.events:
                        self.log.append(EVENTS, key, value, self.now)
                    self.executor_hears(outcome)
            elif not isinstance(decoded, (feed.Committed, feed.Configuration)):
                self.index.apply(decoded)

    def executor_hears(self, outcome: CycleOutcome) -> None:
        """The runs the cycle leased to the executor, less those it ended."""
        for sequence in outcome.sequences:
            for event in sequence["events"]:
                kind, payload = event["payload"]
                if kind.endswith("JobLeased"):
                    self.runs[payload["run_id"]] = (event["job_id"], sequence["queue"], sequence["job_set_id"], payload["node"])
                elif payload.get("run_id") in self.runs:
                    self.runs.pop(payload["run_id"])
                    self.started.pop(payload["run_id"], None)

    def restart(self) -> None:
        """The embedded broker's restart: `events` kept, the feed begun anew, the fold and the index rebuilt from nothing."""
        self.log.sealed.append(self.log.topics.pop((FEED, 0), []))
        self.jobs, self.index, self.folded, self.scheduled, self.configured = dict_jobs(), SchedulerIndex(), {}, 0, False

    def step(self, ms: int = 1_000) -> None:
        """One second of the pipeline: fold, report, tick, fold the cycle's events, runs progress."""
        self.now += ms
        self.fold()
        self.report()
        self.tick()
        self.fold()
        self.run()
