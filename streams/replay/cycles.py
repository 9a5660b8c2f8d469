"""Every recorded cycle repeated: the scheduler feed folded into a fresh index, a cycle at each tick.

A cycle depends only on the index (folded from the feed up to its tick), the tick, the tick's feed
offset (its seed) and the scheduler configuration, so folding the same records into a fresh index
and running a cycle at each tick gives the same decisions, ids included, as the scheduler made.
`repeat` yields, in feed order, each repeated cycle (`Repeated`) and each cycle the scheduler
committed (`Recorded`, the `Committed` record it appended before publishing anything): audit
compares the two, explain reads the repeated cycles' inputs and results, what-if repeats them under
another configuration.

The configuration a cycle was decided with is on the feed: the owner appends a `Configuration`
record before its first tick. `Configurations` keeps them by hash, with the ones given on the
command line (for logs written before the feed carried them) and Armada's defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from streams.scheduler import feed
from streams.scheduler.algorithm.model import CycleInput, CycleResult
from streams.scheduler.config_file import SchedulerConfiguration, parse, parse_recorded
from streams.scheduler.cycle import CycleOutcome, run_cycle
from streams.scheduler.index import SchedulerIndex


@dataclass
class Configurations:
    """The scheduler configurations a replay decides with, by hash.

    ``current`` is what the next cycle is decided with: the last `Configuration` record read from
    the feed, or before any, the first configuration given (else Armada's defaults). With
    ``override`` every cycle is decided with that one, whatever the feed says (what-if)."""

    given: Sequence[SchedulerConfiguration] = ()
    override: SchedulerConfiguration | None = None
    known: dict[str, SchedulerConfiguration] = field(default_factory=dict)
    current: SchedulerConfiguration = field(init=False)
    first: SchedulerConfiguration = field(init=False)
    # Hashes the feed named whose resolved settings parse to another hash (a worker of another release).
    rehashed: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        default = parse({}, "Armada's default scheduler configuration")
        for configuration in (default, *self.given):
            self.known.setdefault(configuration.hash, configuration)
        self.first = self.given[0] if self.given else default
        self.current = self.override or self.first

    def read(self, record: feed.Configuration) -> SchedulerConfiguration:
        """The feed's owner decides with ``record`` from here on."""
        configuration = self.known.get(record.hash)
        if configuration is None:
            configuration = parse_recorded(record.resolved, f"the scheduler configuration {record.hash} on the feed")
            if configuration.hash != record.hash:
                self.rehashed[record.hash] = configuration.hash
                configuration = replace(configuration, hash=record.hash, cycle=replace(configuration.cycle, config_hash=record.hash))
            self.known[record.hash] = configuration
        if self.override is None:
            self.current = configuration
        return configuration

    def start(self) -> None:
        """A new feed generation: its owner announces its configuration afresh (before that, the first given one)."""
        self.current = self.override or self.first


@dataclass
class Repeated:
    """A cycle run again at its tick. ``index`` is the replay's live index just after the cycle (it
    moves on with the replay); ``window`` holds the feed records folded since the previous tick
    when the replay keeps them, ``pools`` each pool's algorithm inputs and result when it captures them."""

    generation: str
    offset: int  # the tick's feed offset: the cycle's seed
    timestamp: int  # the tick's time on the log (ms)
    tick: feed.Tick
    outcome: CycleOutcome
    configuration: SchedulerConfiguration
    index: SchedulerIndex
    window: list[tuple[int, feed.FeedRecord]] = field(default_factory=list)
    pools: list[tuple[str, CycleInput, CycleResult]] = field(default_factory=list)


@dataclass(frozen=True)
class Recorded:
    """What the scheduler committed for the cycle of the tick at ``committed.tick``."""

    generation: str
    offset: int  # the Committed record's own feed offset
    timestamp: int
    committed: feed.Committed


@dataclass(frozen=True)
class Skipped:
    """A feed record that is not one (a replay skips it, as the scheduler does)."""

    generation: str
    offset: int
    reason: str


Step = Repeated | Recorded | Skipped


class Placed(Protocol):
    """Where a record is on the log: any record type of a source or a consumer."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...


def repeat(
    generation: str,
    records: Iterable[tuple[Placed, feed.FeedRecord | None]],
    configurations: Configurations,
    *,
    keep_windows: bool = False,
    capture_pools: bool = False,
) -> Iterator[Step]:
    """Replay one feed generation from offset 0 (``records`` as `streams.replay.source.feed_records` gives them)."""
    index = SchedulerIndex()
    configurations.start()
    window: list[tuple[int, feed.FeedRecord]] = []
    pools: list[tuple[str, CycleInput, CycleResult]] = []

    def observe(pool: str, inputs: CycleInput, result: CycleResult) -> None:
        pools.append((pool, inputs, result))

    for raw, record in records:
        if record is None:
            yield Skipped(generation, raw.offset, "not a scheduler-feed record")
        elif isinstance(record, feed.Tick):
            configuration = configurations.current
            cycle_config = replace(configuration.cycle, observe=observe) if capture_pools else configuration.cycle
            outcome = run_cycle(index, record, raw.offset, cycle_config)
            yield Repeated(generation, raw.offset, raw.timestamp, record, outcome, configuration, index, window, pools)
            window, pools = [], []
        elif isinstance(record, feed.Committed):
            yield Recorded(generation, raw.offset, raw.timestamp, record)
        elif isinstance(record, feed.Configuration):
            configurations.read(record)
            if keep_windows:
                window.append((raw.offset, record))
        else:
            index.apply(record)
            if keep_windows:
                window.append((raw.offset, record))


def decisions(outcome: CycleOutcome) -> list[dict[str, object]]:
    """The decisions a cycle recorded, across all its records (empty when it decided nothing)."""
    return [decision for record in outcome.records for event in record["events"] for decision in event["payload"][1]["decisions"]]
