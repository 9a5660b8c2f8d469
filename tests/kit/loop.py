"""The scheduling loop without a broker: the real fold, the real index and the real cycle.

Everything that would cross a topic crosses its codec here: event sequences and executor
commands through Avro (validated), feed records through the feed's JSON. The fold must accept
every event the cycle emits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from schemas import codec
from streams.domain.validation import SubmitPolicy, validate_item
from streams.replay.cycles import decisions as recorded_decisions
from streams.scheduler import feed
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.feed import ExecutorState, NodeState, QueueInfo
from streams.scheduler.fold import apply_sequence, feed_records
from streams.scheduler.index import SchedulerIndex
from streams.tables.jobs import JobStore
from tests.kit.jobs import container, item
from tests.kit.scheduler import PREEMPTIBLE, nodes, tick
from tests.kit.stores import settle


def events(outcome: CycleOutcome) -> list[tuple[str, str, dict[str, Any]]]:
    """(job id, kind, payload) of every job event of the cycle, in emission order per job set."""
    found = []
    for sequence in outcome.sequences:
        for event in sequence["events"]:
            assert event["job_id"] is not None, f"the cycle emits job events only, not {event}"
            found.append((event["job_id"], event["payload"][0].rsplit(".", 1)[-1], event["payload"][1]))
    return found


def kinds(outcome: CycleOutcome, job_id: str) -> list[str]:
    return [kind for j, kind, _ in events(outcome) if j == job_id]


def leases(outcome: CycleOutcome) -> dict[str, dict[str, Any]]:
    return {j: payload for j, kind, payload in events(outcome) if kind == "JobLeased"}


def preempted(outcome: CycleOutcome) -> set[str]:
    return {j for j, kind, _ in events(outcome) if kind == "JobPreempted"}


def decisions(outcome: CycleOutcome) -> list[dict[str, Any]]:
    assert outcome.records
    return recorded_decisions(outcome)


@dataclass
class Loop:
    config: CycleConfig = field(default_factory=CycleConfig)
    # The submission rules jobs are validated by (the configuration file's, when a test has one).
    policy: SubmitPolicy = field(default_factory=SubmitPolicy)
    table: dict[str, bytes] = field(default_factory=dict)
    specs: dict[str, bytes] = field(default_factory=dict)
    index: SchedulerIndex = field(default_factory=SchedulerIndex)
    offset: int = 0
    # Feed records the fold forwarded that the index has not read yet.
    feed: list[feed.FeedRecord] = field(default_factory=list)
    # Commands from the fold (leases, stops) and from the cycle (orphans).
    commands: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0

    jobs: JobStore = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = JobStore(self.table, self.specs)  # type: ignore[arg-type]  # dicts stand in for the Faust tables: the fold reads them as mappings

    def job(self, job_id: str) -> dict[str, Any]:
        job = self.jobs.get(job_id)
        assert job is not None
        return job

    # -- the log ----------------------------------------------------------------------------
    def publish(self, sequence: dict[str, Any], deliver: bool = True) -> None:
        raw = codec.encode("event_sequence", sequence)
        self.count += 1
        folded = apply_sequence(self.jobs, codec.decode("event_sequence", raw), random.Random(self.count))
        settle(self.jobs)
        assert "refused" not in folded.outcomes and "unknown_job" not in folded.outcomes, folded.outcomes
        self.feed += [feed.decode(feed.encode(changes)) for changes in feed_records(folded.feed)]
        for command in folded.commands:
            # Written as the agent writes it (`job_state.encoded_command`: a spec the fold read in part is
            # copied as its bytes, not validated field by field), and read back whole.
            codec.decode("executor_command", codec.encode("executor_command", command, validate_record=False))
            self.commands.append(command)
        if deliver:
            self.deliver()

    def deliver(self) -> None:
        for record in self.feed:
            assert not isinstance(record, feed.Tick | feed.Committed | feed.Configuration), (
                "ticks, commits and configurations come from the scheduler, not the fold"
            )
            self.index.apply(record)
        self.feed.clear()

    def event(self, job_id: str | None, kind: str, at: int, queue: str = "a", job_set: str = "s", **payload: Any) -> None:
        self.count += 1
        event = {"event_id": f"ev-{self.count}", "created": at, "job_id": job_id, "payload": (f"flotilla.{kind}", payload)}
        self.publish({"queue": queue, "job_set_id": job_set, "user": "u", "groups": [], "events": [event]})

    def submit(
        self,
        job_id: str,
        queue: str = "a",
        cpu: str = "1",
        at: int = 1_000,
        job_set: str = "s",
        pc: str = PREEMPTIBLE,
        annotations: dict[str, str] | None = None,
        tolerations: list[dict[str, str]] | None = None,
    ) -> None:
        payload, reason = validate_item(
            item(
                annotations=annotations or {},
                pod_spec__priority_class_name=pc,
                pod_spec__containers=[container(cpu=cpu, memory="1Gi")],
                pod_spec__tolerations=tolerations or [],
            ),
            self.policy,
        )
        assert reason is None and payload is not None, reason
        self.event(job_id, "JobSubmitted", at, queue, job_set, **payload)

    def run_event(self, job_id: str, kind: str, at: int, **payload: Any) -> None:
        job = self.job(job_id)
        self.event(job_id, kind, at, job["queue"], job["job_set_id"], **payload)

    def return_run(self, job_id: str, at: int) -> None:
        """The executor gives the job's latest run back (it could not start the pod)."""
        run = self.job(job_id)["runs"][-1]
        self.run_event(
            job_id,
            "JobRunFailed",
            at,
            run_id=run["run_id"],
            reason="returned",
            message="pod could not start",
            exit_code=None,
            category="lease_returned",
            retryable=True,
        )

    def report(
        self,
        name: str,
        at: int,
        node_states: tuple[NodeState, ...] | None = None,
        pool: str = "default",
        extra: dict[str, str] | None = None,
        drop: tuple[str, ...] = (),
    ) -> ExecutorState:
        """A report from an executor holding every active run the fold gave it (less ``drop``, plus ``extra``)."""
        held = {}
        for job_id in sorted(self.table):
            job = self.job(job_id)
            for run in job["runs"]:
                if run["executor"] == name and run["state"] in ("leased", "pending", "running") and run["run_id"] not in drop:
                    held[run["run_id"]] = job_id
        held.update(extra or {})
        state = ExecutorState(name, pool, at, nodes() if node_states is None else node_states, held, tuple(held))
        self.feed.append(feed.decode(feed.encode(state)))
        self.deliver()
        return state

    # -- the scheduler ------------------------------------------------------------------------
    def cycle(self, at: int, *queues: str | QueueInfo, deliver: bool = True, offset: int | None = None) -> CycleOutcome:
        """Run the cycle of a tick at ``at``; ``offset`` (the tick's on the feed) repeats an earlier one."""
        if offset is None:
            self.offset += 1
            offset = self.offset
        outcome = run_cycle(self.index, tick(at, *queues), offset, self.config)
        for command in outcome.commands:
            codec.encode("executor_command", command)
        for sequence in outcome.sequences:
            self.publish(sequence, deliver=False)
        for record in outcome.records:
            self.publish(record, deliver=False)
        self.commands += outcome.commands
        if deliver:
            self.deliver()
        return outcome

    def restart(self) -> None:
        """The scheduling agent's worker restarts: it rebuilds the index from the index's table,
        which holds what the index had written, whatever the feed offset it goes on from."""
        table = {key: value for key in self.index.keys() if (value := self.index.dump(key)) is not None}
        self.index = SchedulerIndex()
        self.index.load(sorted(table.items()))
