"""A scheduling loop that keeps its log: the events (in order) and the scheduler feed (with offsets)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from schemas import codec
from streams.archive.segments import Record
from streams.replay.cycles import Configurations
from streams.replay.explain import replayed_outcomes
from streams.scheduler import feed
from streams.scheduler.algorithm.model import PriorityClass
from streams.scheduler.config import CycleConfig, default_priority_classes
from streams.scheduler.config_file import parse
from streams.scheduler.cycle import CycleOutcome
from streams.scheduler.feed import QueueInfo
from tests.kit.loop import Loop
from tests.kit.scheduler import nodes, tick


@dataclass
class LoggedLoop(Loop):
    """The loop, keeping what reached `events` (in order) and the scheduler feed (with offsets)."""

    log: list[dict[str, Any]] = field(default_factory=list)
    feed_log: list[tuple[int, bytes]] = field(default_factory=list)

    def publish(self, sequence: dict[str, Any], deliver: bool = True) -> None:
        self.log.append(codec.decode("event_sequence", codec.encode("event_sequence", sequence)))
        super().publish(sequence, deliver)

    def deliver(self) -> None:
        for record in self.feed:
            self.feed_log.append((len(self.feed_log), feed.encode(record)))
        super().deliver()

    def cycle(self, at: int, *queues: str | QueueInfo, deliver: bool = True, offset: int | None = None) -> CycleOutcome:
        self.deliver()
        offset = len(self.feed_log)
        self.feed_log.append((offset, feed.encode(tick(at, *queues))))
        return super().cycle(at, *queues, deliver=deliver, offset=offset)


def replayed(loop: LoggedLoop, job_id: str) -> dict[str, Any]:
    """The loop's feed replayed with the loop's own configuration."""
    return replayed_outcomes([("feed", feed_records(loop))], own_configuration(loop), job_id)


def own_configuration(loop: Loop) -> Configurations:
    return Configurations(given=[replace(parse({}), cycle=loop.config)])


def small(loop: Loop, at: int, cpu: int = 4) -> None:
    loop.report("ex1", at, nodes(count=1, cpu=cpu))


def with_class(extra: PriorityClass) -> LoggedLoop:
    """A loop whose configuration and policy know ``extra`` beside the default priority classes, with
    four 1-cpu jobs of queue a (a0..a3) submitted and a 4-cpu node reported, before a first cycle at 2 s."""
    classes = {**default_priority_classes(), extra.name: extra}
    loop = LoggedLoop(config=CycleConfig(scheduling=replace(CycleConfig().scheduling, priority_classes=classes)))
    loop.policy = replace(loop.policy, priority_classes=frozenset(classes))
    for i in range(4):
        loop.submit(f"a{i}", "a", cpu="1", at=1_000 + i)
    small(loop, 1_500)
    return loop


def feed_records(loop: LoggedLoop) -> list[tuple[Record, feed.FeedRecord | None]]:
    """The loop's feed as `streams.replay.source.feed_records` gives a generation's, one tick a second apart on the log."""
    return [(Record("feed", 0, offset, 0, None, raw, ()), feed.decode(raw)) for offset, raw in loop.feed_log]
