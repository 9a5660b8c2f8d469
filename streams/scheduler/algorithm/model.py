"""Domain types of one scheduling cycle: what goes in, what comes out.

Resources are integer milli-units (see `streams.domain.quantity.to_milli`) keyed by
resource name, so that every decision is exact and reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streams.scheduler.algorithm.state import RunningStates

Resources = Mapping[str, int]

GANG_ID_ANNOTATION = "armadaproject.io/gangId"
GANG_CARDINALITY_ANNOTATION = "armadaproject.io/gangCardinality"
GANG_MIN_CARDINALITY_ANNOTATION = "armadaproject.io/gangMinimumCardinality"
GANG_UNIFORMITY_ANNOTATION = "armadaproject.io/gangNodeUniformityLabel"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration; an empty effect tolerates every effect, operator Exists ignores the value."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One `requiredDuringScheduling` match expression: In, NotIn, Exists, DoesNotExist, Gt, Lt."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the scheduler sees it. Within a queue, a lower `priority` goes first (a float, as
    Armada's: 1.5 sits between 1 and 2); `submit_time` orders jobs of equal priority."""

    id: str
    queue: str
    priority_class: str
    requests: Resources
    submit_time: float = 0.0
    priority: float = 1000
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # Required node affinity: a node must satisfy every requirement of at least one term.
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def gang_id(self) -> str:
        return self.annotations.get(GANG_ID_ANNOTATION, "")

    @property
    def gang_cardinality(self) -> int:
        return int(self.annotations.get(GANG_CARDINALITY_ANNOTATION, "1")) if self.gang_id else 1

    @property
    def gang_min_cardinality(self) -> int:
        """Members that must be placed for the gang to count as scheduled (historical partial gangs)."""
        if not self.gang_id:
            return 1
        return int(self.annotations.get(GANG_MIN_CARDINALITY_ANNOTATION, str(self.gang_cardinality)))

    @property
    def gang_uniformity_label(self) -> str:
        return self.annotations.get(GANG_UNIFORMITY_ANNOTATION, "") if self.gang_id else ""


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job bound to a node, with the priority it was scheduled at (lower than its class when away)."""

    job: Job
    node: str
    scheduled_priority: int
    started_at: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """Resources held on a node by pods the scheduler does not manage, at a priority."""

    priority: int
    resources: Resources


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    resources: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocated: tuple[NodeAllocation, ...] = ()
    # The cluster the node belongs to: the members of a gang are placed in one.
    executor: str = ""


@dataclass(frozen=True, slots=True)
class AwayNodeType:
    """Lets a priority class run on a well-known node type at a lower (preemptible-by-home) priority."""

    priority: int
    well_known_node_type: str


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    priority: int
    preemptible: bool
    away_node_types: tuple[AwayNodeType, ...] = ()
    maximum_resource_fraction_per_queue: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WellKnownNodeType:
    name: str
    taints: tuple[Taint, ...]


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    weight: float = 1.0
    cordoned: bool = False
    # Per priority class: resource -> maximum fraction of the pool this queue may hold in that class.
    resource_limits: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Token bucket: `rate` tokens per second up to `burst`; rate None means unlimited."""

    rate: float | None
    burst: int


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """Persisted limiter state: tokens available at time `at` (seconds)."""

    tokens: float
    at: float


@dataclass(frozen=True, slots=True)
class LimiterState:
    """Rate-limiter buckets carried from one cycle to the next; missing buckets start full."""

    scheduling: TokenBucket | None = None
    per_queue: Mapping[str, TokenBucket] = field(default_factory=dict)
    fairshare_preemption: TokenBucket | None = None


UNLIMITED = RateLimit(rate=None, burst=2**62)


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    priority_classes: Mapping[str, PriorityClass]
    dominant_resource_fairness_resources: tuple[str, ...] = ("cpu", "memory", "nvidia.com/gpu")
    # A resource's share of the pool counts this many times in the cost (1 when not listed).
    dominant_resource_fairness_multipliers: Mapping[str, float] = field(default_factory=dict)
    # (resource, resolution in milli-units): node ordering key for tightest fit, in order.
    indexed_resources: tuple[tuple[str, int], ...] = (("cpu", 1000), ("memory", 128 * 2**20 * 1000), ("nvidia.com/gpu", 1000))
    indexed_node_labels: tuple[str, ...] = ()
    well_known_node_types: Mapping[str, WellKnownNodeType] = field(default_factory=dict)
    scheduling_rate: RateLimit = UNLIMITED
    per_queue_scheduling_rate: RateLimit = UNLIMITED
    fairshare_preemption_rate: RateLimit | None = None
    max_queue_lookback: int = 0
    maximum_resource_fraction_to_schedule: Mapping[str, float] = field(default_factory=dict)
    protected_fraction_of_fair_share: float = 1.0
    enable_prefer_large_job_ordering: bool = False
    enable_fairshare_preemption: bool = True
    node_eviction_probability: float = 1.0


@dataclass(frozen=True, slots=True)
class CycleInput:
    """Everything one cycle depends on. `queues` are the active queues of the pool.

    `demand`, when given, replaces the per-queue demand otherwise derived from the queued and
    running jobs passed in (callers that know of jobs outside this cycle, e.g. in other pools).
    `allocated` is what queues hold outside this cycle's nodes, per queue and priority class:
    counted in their costs and per-class limits, placed on no node.
    `stranded` is what the pool's running jobs hold on nodes no cycle may use now (their executor
    is stale), per queue and priority class: as Armada counts the jobs of every executor in the
    queues' allocation and demand but builds its node db from the healthy executors only, it
    counts in the costs, per-class limits and demand as a running job does, while those jobs,
    on no node of the cycle, are never evicted.
    """

    queues: tuple[Queue, ...]
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    queued: tuple[Job, ...]
    now: float
    seed: int = 0
    limiters: LimiterState = field(default_factory=LimiterState)
    demand: Mapping[str, Resources] | None = None
    allocated: Mapping[str, Mapping[str, Resources]] = field(default_factory=dict)
    stranded: Mapping[str, Mapping[str, Resources]] = field(default_factory=dict)
    # The states of the pool's running jobs and its node db's base kept from its last cycle
    # (`state.RunningStates`), which this cycle reuses and replaces with its own; the result does not depend on it.
    carried: RunningStates | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    job_id: str
    node: str
    priority: int


@dataclass(frozen=True, slots=True)
class PreemptedJob:
    job_id: str
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unscheduled:
    """Queued jobs left queued for the same reason; `attempted` is False when the cycle never
    got to consider them. Grouped because a cycle may leave a million jobs queued."""

    reason: str
    attempted: bool
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QueueShare:
    queue: str
    fair_share: float
    adjusted_fair_share: float
    actual_share: float
    # What the queue holds in the pool after the cycle's decisions (milli-units, resources it holds any of).
    allocation: Resources = field(default_factory=dict)
    # The share it held when the cycle started: what fair-share eviction compared with its fair share.
    share_before: float = 0.0


@dataclass(frozen=True, slots=True)
class CycleResult:
    scheduled: tuple[ScheduledJob, ...]
    preempted: tuple[PreemptedJob, ...]
    unscheduled: tuple[Unscheduled, ...]
    limiters: LimiterState
    shares: tuple[QueueShare, ...]
    # The pool's resources the costs, fair shares and limits were fractions of (`nodedb.PoolNodes.totals`).
    capacity: Resources = field(default_factory=dict)

    def left_queued(self) -> dict[str, Unscheduled]:
        """Each job left queued, with the group that says why."""
        return {job_id: group for group in self.unscheduled for job_id in group.job_ids}
