"""Load a scenario file, emulate the Go test harness it was transcribed from, compare outcomes.

The harnesses and the `testfixtures` base configuration are described in the scenarios'
README (sections 2 and 3); this module is their executable form. The keys it reads beyond that
README (job `affinity`, round `cordon`, `indexed_resources`, `enable_fairshare_preemption`,
`maximum_resource_fraction_to_schedule_by_pool`, `expected.gang_uniformity`) are described in
tests/scenarios/armada/README.md, beside the cases that use them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from streams.domain.quantity import to_milli
from streams.scheduler.algorithm.model import (
    GANG_ID_ANNOTATION,
    GANG_UNIFORMITY_ANNOTATION,
    UNLIMITED,
    AwayNodeType,
    CycleInput,
    CycleResult,
    Job,
    LimiterState,
    Node,
    NodeAllocation,
    NodeSelectorRequirement,
    PreemptedJob,
    PriorityClass,
    Queue,
    RateLimit,
    RunningJob,
    ScheduledJob,
    SchedulingConfig,
    Taint,
    Toleration,
    Unscheduled,
    WellKnownNodeType,
)
from streams.scheduler.algorithm.preempting import schedule
from streams.scheduler.config_file import parse_duration

HOSTNAME_LABEL = "kubernetes.io/hostname"
NODE_ID_LABEL = "armadaproject.io/nodeId"
DEFAULT_POOL = "testPool"
# The taint Armada's TestPreemptingQueueScheduler cordons a node with (internaltypes.UnschedulableTaint).
CORDON_TAINT = Taint("armadaproject.io/unschedulable", "true", "NoSchedule")

_FIXTURE_CLASSES = (
    PriorityClass("priority-0", 0, True),
    PriorityClass("priority-1", 1, True),
    PriorityClass("priority-2", 2, True),
    PriorityClass("priority-2-non-preemptible", 2, False),
    PriorityClass("priority-3", 3, False),
    PriorityClass("armada-preemptible-away", 30000, True, (AwayNodeType(29000, "gpu"), AwayNodeType(29000, "large"))),
    PriorityClass("armada-preemptible-away-lower", 30000, True, (AwayNodeType(28000, "gpu"), AwayNodeType(28000, "large"))),
    PriorityClass("armada-preemptible", 30000, True),
)
_FIXTURE_NODE_TYPES = (
    WellKnownNodeType("gpu", (Taint("gpu", "true", "NoSchedule"),)),
    WellKnownNodeType("large", (Taint("largeJobsOnly", "true", "NoSchedule"),)),
)
_FIXTURE_INDEXED_LABELS = ("largeJobsOnly", "gpu", "cluster", "pool", "nodetype")
HARNESSES = frozenset(
    {
        "queue_scheduler_single_round",
        "preempting_multi_round",
        "gang_scheduler_sequential",
        "queue_scheduler_with_evicted_running_jobs",
        "scheduling_algo",
    }
)
# Keys of `config` that only document the Go test set-up and need no emulation here.
_DESCRIPTIVE_CONFIG = {"base", "queue_demand", "queue_weights_direct", "priority_classes_used"}


class ScenarioError(ValueError):
    """A scenario file this runner cannot replay faithfully."""


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    round: int
    scheduled: tuple[str, ...]
    preempted: tuple[str, ...]
    still_queued: tuple[str, ...]
    never_attempted: tuple[str, ...]
    counts: Mapping[str, Any]
    placements: Mapping[str, str]  # scheduled job id -> node id


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    name: str
    rounds: tuple[RoundOutcome, ...]

    def to_json(self, expected_counts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
        rounds = []
        for outcome, wanted in zip(self.rounds, expected_counts, strict=False):
            entry: dict[str, Any] = {
                "round": outcome.round,
                "scheduled": sorted(outcome.scheduled),
                "preempted": sorted(outcome.preempted),
                "still_queued": sorted(outcome.still_queued),
            }
            if wanted is not None:
                entry["counts"] = {key: outcome.counts[key] for key in wanted}
            rounds.append(entry)
        return {"name": self.name, "rounds": rounds}


def load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# -- configuration ---------------------------------------------------------------------------
def _rate(config: Mapping[str, Any], rate_key: str, burst_key: str) -> RateLimit:
    if rate_key not in config and burst_key not in config:
        return UNLIMITED
    rate = config.get(rate_key)
    return RateLimit(rate=None if rate is None else float(rate), burst=int(config.get(burst_key, UNLIMITED.burst)))


def _taints(raw: Sequence[Mapping[str, str]] | None) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], str(t.get("value", "")), t.get("effect", "NoSchedule")) for t in raw or ())


def build_config(doc: Mapping[str, Any]) -> tuple[SchedulingConfig, str]:
    """The testfixtures configuration with the scenario's overrides; also the default class."""
    raw = dict(doc.get("config") or {})
    classes = {pc.name: pc for pc in _FIXTURE_CLASSES}
    for name, spec in (raw.get("priority_classes_used") or {}).items():
        away = tuple(AwayNodeType(int(a["priority"]), a["well_known_node_type"]) for a in spec.get("away_node_types", ()))
        base = classes.get(name)
        classes[name] = PriorityClass(
            name, int(spec["priority"]), bool(spec["preemptible"]), away or (base.away_node_types if base else ())
        )
    for name, spec in (raw.get("priority_class_overrides") or {}).items():
        classes[name] = replace(classes[name], maximum_resource_fraction_per_queue=dict(spec["maximum_resource_fraction_per_queue"]))
    node_types = {t.name: t for t in _FIXTURE_NODE_TYPES}
    if "well_known_node_types" in raw:
        node_types = {t["name"]: WellKnownNodeType(t["name"], _taints(t.get("taints"))) for t in raw["well_known_node_types"]}
    harness = doc["harness"]
    fair = raw.get("fairshare_preemption_rate_limit")
    known = _DESCRIPTIVE_CONFIG | {
        "maximum_scheduling_rate",
        "maximum_scheduling_burst",
        "maximum_per_queue_scheduling_rate",
        "maximum_per_queue_scheduling_burst",
        "max_queue_lookback",
        "maximum_resource_fraction_to_schedule",
        "protected_fraction_of_fair_share",
        "enable_prefer_large_job_ordering",
        "priority_class_overrides",
        "default_priority_class",
        "well_known_node_types",
        "indexed_node_labels_add",
        "fairshare_preemption_rate_limit",
        "pool",
        "executor_timeout",
        "max_unacknowledged_jobs_per_executor",
        "indexed_resources",
        "enable_fairshare_preemption",
        "maximum_resource_fraction_to_schedule_by_pool",
    }
    unknown = set(raw) - known
    if unknown:
        raise ScenarioError(f"unsupported config keys {sorted(unknown)}")
    # A pool's own round limit replaces the global one (Go: MaximumResourceFractionToScheduleByPool).
    by_pool: Mapping[str, Mapping[str, float]] = raw.get("maximum_resource_fraction_to_schedule_by_pool") or {}
    round_limits: Mapping[str, float] = by_pool.get(raw.get("pool", DEFAULT_POOL), raw.get("maximum_resource_fraction_to_schedule", {}))
    # `indexed_resources`: [{name, resolution}] replaces the node ordering key (Go: WithIndexedResourcesConfig).
    indexed = tuple((r["name"], to_milli(r["resolution"])) for r in raw["indexed_resources"]) if "indexed_resources" in raw else None
    config = SchedulingConfig(
        priority_classes=classes,
        indexed_node_labels=_FIXTURE_INDEXED_LABELS + tuple(raw.get("indexed_node_labels_add", ())),
        well_known_node_types=node_types,
        scheduling_rate=_rate(raw, "maximum_scheduling_rate", "maximum_scheduling_burst"),
        per_queue_scheduling_rate=_rate(raw, "maximum_per_queue_scheduling_rate", "maximum_per_queue_scheduling_burst"),
        fairshare_preemption_rate=RateLimit(float(fair["rate"]), int(fair["burst"])) if fair else None,
        max_queue_lookback=int(raw.get("max_queue_lookback", 0)),
        maximum_resource_fraction_to_schedule=dict(round_limits),
        protected_fraction_of_fair_share=float(raw.get("protected_fraction_of_fair_share", 0.0)),
        # Go: a pool's DisableFairshareScheduling (WithPreemptionDisabled(true, false, ...)).
        enable_fairshare_preemption=bool(raw.get("enable_fairshare_preemption", True)),
        enable_prefer_large_job_ordering=(harness == "preempting_multi_round" or bool(raw.get("enable_prefer_large_job_ordering", True))),
    )
    if indexed is not None:
        config = replace(config, indexed_resources=indexed)
    return config, raw.get("default_priority_class", "priority-3")


def _pool(doc: Mapping[str, Any]) -> str:
    return (doc.get("config") or {}).get("pool", DEFAULT_POOL)


def build_nodes(doc: Mapping[str, Any]) -> tuple[Node, ...]:
    nodes = []
    for spec in doc["nodes"]:
        labels = {HOSTNAME_LABEL: spec["id"], NODE_ID_LABEL: spec["id"], **{k: str(v) for k, v in (spec.get("labels") or {}).items()}}
        used = spec.get("used")
        allocated = (NodeAllocation(int(used["priority"]), {k: to_milli(v) for k, v in used["resources"].items()}),) if used else ()
        nodes.append(
            Node(
                id=spec["id"],
                resources={k: to_milli(v) for k, v in spec["resources"].items()},
                labels=labels,
                taints=_taints(spec.get("taints")),
                unschedulable=bool(spec.get("unschedulable", False)),
                allocated=allocated,
            )
        )
    return tuple(nodes)


def build_queues(doc: Mapping[str, Any], pool: str | None = None) -> tuple[Queue, ...]:
    """The queues, with their per-class limits for ``pool`` (the scenario's pool if not given)."""
    pool = pool or _pool(doc)
    queues = []
    for spec in doc["queues"]:
        limits: dict[str, dict[str, float]] = {}
        for pc, raw in (spec.get("resource_limits_by_priority_class_name") or {}).items():
            merged = dict(raw.get("maximum_resource_fraction", {}))
            merged.update(((raw.get("maximum_resource_fraction_by_pool") or {}).get(pool) or {}).get("maximum_resource_fraction", {}))
            limits[pc] = merged
        weight = float(spec["weight"]) if "weight" in spec else 1.0 / float(spec["priority_factor"])
        queues.append(Queue(name=spec["name"], weight=weight, cordoned=bool(spec.get("cordoned", False)), resource_limits=limits))
    return tuple(queues)


def build_job(spec: Mapping[str, Any], default_class: str, submit_time: float) -> Job:
    tolerations = tuple(
        Toleration(t.get("key", ""), t.get("operator", "Equal"), str(t.get("value", "")), t.get("effect", ""))
        for t in spec.get("tolerations") or ()
    )
    # Required node affinity: a list of terms (any may match), each a list of requirements (all must).
    affinity = tuple(
        tuple(NodeSelectorRequirement(r["key"], r["operator"], tuple(str(v) for v in r.get("values") or ())) for r in term)
        for term in spec.get("affinity") or ()
    )
    return Job(
        id=spec["id"],
        queue=spec["queue"],
        priority_class=spec.get("priority_class", default_class),
        requests={k: to_milli(v) for k, v in spec["requests"].items()},
        submit_time=submit_time,
        priority=float(spec.get("priority", 1000)),
        node_selector={k: str(v) for k, v in (spec.get("node_selector") or {}).items()},
        tolerations=tolerations,
        affinity=affinity,
        annotations={k: str(v) for k, v in (spec.get("annotations") or {}).items()},
    )


# -- harnesses -------------------------------------------------------------------------------
def _add(total: dict[str, int], requests: Mapping[str, int]) -> None:
    for name, amount in requests.items():
        total[name] = total.get(name, 0) + amount


def _outcome(number: int, result: CycleResult, submitted: Sequence[Job]) -> RoundOutcome:
    scheduled = tuple(s.job_id for s in result.scheduled)
    scheduled_set = set(scheduled)
    unscheduled = result.left_queued()
    gangs: dict[str, list[Job]] = {}
    for job in submitted:
        if job.gang_id:
            gangs.setdefault(job.gang_id, []).append(job)
    gangs_ok = all(sum(j.id in scheduled_set for j in members) >= members[0].gang_min_cardinality for members in gangs.values())
    still = tuple(j.id for j in submitted if j.id not in scheduled_set)
    counts = {
        "new_jobs_scheduled": len(scheduled),
        "running_jobs_preempted": len(result.preempted),
        "jobs_scheduled": len(scheduled),
        "jobs_failed": len(still),
        "gang_scheduled": gangs_ok,
    }
    return RoundOutcome(
        round=number,
        scheduled=scheduled,
        preempted=tuple(p.job_id for p in result.preempted),
        still_queued=still,
        never_attempted=tuple(i for i in still if i in unscheduled and not unscheduled[i].attempted),
        counts=counts,
        placements={s.job_id: s.node for s in result.scheduled},
    )


def build_allocation(doc: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """``initial_allocation``: per queue and priority class, resources held but placed on no node."""
    return {
        queue: {pc: {name: to_milli(amount) for name, amount in resources.items()} for pc, resources in by_class.items()}
        for queue, by_class in (doc.get("initial_allocation") or {}).items()
    }


def _initial_running(doc: Mapping[str, Any], config: SchedulingConfig, default_class: str) -> list[tuple[RunningJob, bool]]:
    """The jobs running at the start, each with whether its executor has acknowledged it."""
    running = []
    submitted_count = 0
    for group in doc.get("initial_running") or ():
        for spec in group["jobs"]:
            job = build_job(spec, default_class, float(submitted_count))
            submitted_count += 1
            held = RunningJob(job, group["node"], config.priority_classes[job.priority_class].priority)
            running.append((held, bool(group.get("acknowledged", True))))
    return running


def run(doc: Mapping[str, Any]) -> ScenarioOutcome:
    """Replay every round of a scenario document under its harness."""
    harness = doc["harness"]
    if harness not in HARNESSES:
        raise ScenarioError(f"unknown harness {harness!r} (known: {', '.join(sorted(HARNESSES))})")
    if "executors" in doc and harness != "scheduling_algo":
        raise ScenarioError(f"executors are given to the scheduling_algo harness only, not to {harness}")
    config, default_class = build_config(doc)
    if harness == "scheduling_algo":
        return _run_algo(doc, config, default_class)
    nodes, queues = build_nodes(doc), build_queues(doc)
    initial = _initial_running(doc, config, default_class)
    running = [held for held, _ in initial]
    submitted_count = len(running)
    allocated = build_allocation(doc)
    demand: dict[str, dict[str, int]] = {q.name: {} for q in queues}
    limiters = LimiterState()
    outcomes = []
    cordoned: set[str] = set()
    for round_spec in doc["rounds"]:
        number = int(round_spec["round"])
        # `cordon`: node ids cordoned before this round, for good (Go: NodeIndicesToCordon). As the Go test
        # does it: by Armada's unschedulable taint alone, so the node still counts in the pool's totals.
        newly = set(round_spec.get("cordon") or ()) - cordoned
        unknown = newly - {node.id for node in nodes}
        if unknown:
            raise ScenarioError(f"round {number}: cordon lists unknown nodes {sorted(unknown)}")
        cordoned |= newly
        nodes = tuple(replace(node, taints=(*node.taints, CORDON_TAINT)) if node.id in newly else node for node in nodes)
        submitted = []
        for spec in round_spec.get("submit") or ():
            submitted.append(build_job(spec, default_class, float(submitted_count)))
            submitted_count += 1
        for job in submitted:
            _add(demand.setdefault(job.queue, {}), job.requests)
        if harness == "preempting_multi_round":
            # The Go test passes every job ever submitted as demand, never reduced.
            round_demand: Mapping[str, Mapping[str, int]] | None = {q: dict(d) for q, d in demand.items()}
        elif harness == "queue_scheduler_with_evicted_running_jobs":
            round_demand = {q.name: {} for q in queues}
        else:
            round_demand = None
        inputs = CycleInput(
            queues=queues,
            nodes=nodes,
            running=tuple(running),
            queued=tuple(submitted),
            now=float(number),
            seed=number,
            limiters=limiters,
            demand=round_demand,
            allocated=allocated,
        )
        result = schedule(inputs, config)
        outcomes.append(_outcome(number, result, submitted))
        limiters = result.limiters
        preempted = {p.job_id for p in result.preempted}
        by_id = {j.id: j for j in submitted}
        running = [r for r in running if r.job.id not in preempted]
        running += [RunningJob(by_id[s.job_id], s.node, s.priority, float(number)) for s in result.scheduled]
    return ScenarioOutcome(name=doc["name"], rounds=tuple(outcomes))


def _run_algo(doc: Mapping[str, Any], config: SchedulingConfig, default_class: str) -> ScenarioOutcome:
    """The `scheduling_algo` harness: Armada's whole FairSchedulingAlgo over executors, as the
    running scheduler does. Each pool of executors is scheduled on its own (a job leased in one
    pool is not offered to the next); executors whose last update is older than the executor
    timeout, or that hold more unacknowledged jobs than allowed, get no new job, and the jobs running
    on them count in their queues' allocation and demand in their pool without being evicted (Go
    counts the jobs of every executor, then builds the node db from the usable ones); the queues of
    a pool are those with jobs in it; jobs left unscheduled stay queued for the next round."""
    raw_config = doc.get("config") or {}
    timeout_s = _seconds(raw_config.get("executor_timeout", "15m"), "config.executor_timeout")
    max_unacknowledged = raw_config.get("max_unacknowledged_jobs_per_executor")
    specs = {spec["id"]: spec for spec in doc["nodes"]}
    nodes: dict[str, Node] = {}
    executors = []
    for executor in doc["executors"]:
        missing = [n for n in executor["nodes"] if n not in specs]
        if missing:
            raise ScenarioError(f"executor {executor['id']} lists unknown nodes {missing}")
        pool = executor.get("pool", DEFAULT_POOL)
        executors.append((executor["id"], pool, tuple(executor["nodes"]), _seconds(executor.get("last_update", 0), "last_update")))
        for built in build_nodes({"nodes": [specs[n] for n in executor["nodes"]]}):
            nodes[built.id] = replace(built, executor=executor["id"])
    executor_of = {node_id: name for name, _, node_ids, _ in executors for node_id in node_ids}
    initial = _initial_running(doc, config, default_class)
    running = [held for held, _ in initial]
    unacknowledged = Counter(executor_of.get(held.node, "") for held, acknowledged in initial if not acknowledged)
    submitted_count = len(running)
    allocated = build_allocation(doc)
    queued: list[Job] = []
    limiters = LimiterState()
    outcomes = []
    for round_spec in doc["rounds"]:
        number = int(round_spec["round"])
        now = float(number)
        submitted = []
        for spec in round_spec.get("submit") or ():
            submitted.append(build_job(spec, default_class, float(submitted_count)))
            submitted_count += 1
        queued += submitted
        usable = [
            (name, pool, node_ids)
            for name, pool, node_ids, last_update in executors
            if now - last_update <= timeout_s and (max_unacknowledged is None or unacknowledged[name] <= int(max_unacknowledged))
        ]
        usable_names = {name for name, _, _ in usable}
        unusable = {node_id: pool for name, pool, node_ids, _ in executors if name not in usable_names for node_id in node_ids}
        scheduled: list[ScheduledJob] = []
        preempted: list[PreemptedJob] = []
        left: dict[str, Unscheduled] = {}
        for pool in sorted({pool for _, pool, _ in usable}):
            pool_nodes = tuple(nodes[n] for _, p, node_ids in usable if p == pool for n in node_ids)
            here = {node.id for node in pool_nodes}
            pool_running = tuple(r for r in running if r.node in here)
            stranded: dict[str, dict[str, dict[str, int]]] = {}
            for held in (r for r in running if unusable.get(r.node) == pool):
                _add(stranded.setdefault(held.job.queue, {}).setdefault(held.job.priority_class, {}), held.job.requests)
            taken = {s.job_id for s in scheduled}
            pool_queued = tuple(j for j in queued if j.id not in taken)
            active = {j.queue for j in pool_queued} | {r.job.queue for r in pool_running} | stranded.keys()
            inputs = CycleInput(
                queues=tuple(q for q in build_queues(doc, pool) if q.name in active),
                nodes=pool_nodes,
                running=pool_running,
                queued=pool_queued,
                now=now,
                seed=number,
                limiters=limiters,
                allocated=allocated,
                stranded=stranded,
            )
            result = schedule(inputs, config)
            limiters = replace(result.limiters, per_queue={**limiters.per_queue, **result.limiters.per_queue})
            scheduled += result.scheduled
            preempted += result.preempted
            left.update(result.left_queued())
        placed = {s.job_id for s in scheduled}
        combined = CycleResult(
            scheduled=tuple(scheduled),
            preempted=tuple(preempted),
            unscheduled=tuple({id(group): group for job_id, group in left.items() if job_id not in placed}.values()),
            limiters=limiters,
            shares=(),
        )
        outcomes.append(_outcome(number, combined, submitted))
        gone = {p.job_id for p in preempted}
        by_id = {j.id: j for j in queued}
        running = [r for r in running if r.job.id not in gone] + [RunningJob(by_id[s.job_id], s.node, s.priority, now) for s in scheduled]
        queued = [j for j in queued if j.id not in placed]
    return ScenarioOutcome(name=doc["name"], rounds=tuple(outcomes))


def _seconds(raw: Any, where: str) -> float:
    """A number of seconds, or a duration such as 15m or -1h (relative to the harness's start)."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    text = str(raw).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    seconds = parse_duration(text.lstrip("+-"))
    if seconds is None:
        raise ScenarioError(f"{where}: {raw!r} is neither a number of seconds nor a duration such as 15m or -1h")
    return sign * seconds


def _uniformity_problems(doc: Mapping[str, Any], spec: Mapping[str, Any], got: RoundOutcome) -> list[str]:
    """Every gang of the round with a node-uniformity label must have its scheduled members on nodes sharing
    one value of that label (Go's TestGangScheduler asserts this for every scheduled gang), and that value is
    `expected.gang_uniformity[gang id]` where given."""
    labels = {n["id"]: {k: str(v) for k, v in (n.get("labels") or {}).items()} for n in doc["nodes"]}
    values: dict[str, set[str | None]] = {}
    for job in spec.get("submit") or ():
        annotations = job.get("annotations") or {}
        label = annotations.get(GANG_UNIFORMITY_ANNOTATION, "")
        if label and job["id"] in got.placements:
            values.setdefault(annotations[GANG_ID_ANNOTATION], set()).add(labels[got.placements[job["id"]]].get(label))
    problems = [
        f"round {got.round}: gang {g} placed across label values {sorted(map(str, v))}"
        for g, v in values.items()
        if len(v) != 1 or None in v
    ]
    for gang, want in ((spec.get("expected") or {}).get("gang_uniformity") or {}).items():
        if values.get(gang) != {str(want)}:
            problems.append(f"round {got.round}: gang {gang} on label values {sorted(map(str, values.get(gang, ())))}, expected {want}")
    return problems


def expected_counts(doc: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
    return [(r.get("expected") or {}).get("counts") for r in doc["rounds"]]


def differences(doc: Mapping[str, Any], outcome: ScenarioOutcome) -> list[str]:
    """Every way the outcome departs from the file's expectations (empty when it matches)."""
    problems = []
    for spec, got in zip(doc["rounds"], outcome.rounds, strict=False):
        expected = spec.get("expected") or {}
        problems += _uniformity_problems(doc, spec, got)
        if "counts" in expected:
            for key, value in expected["counts"].items():
                if got.counts[key] != value:
                    problems.append(f"round {got.round}: {key} = {got.counts[key]!r}, expected {value!r}")
            continue
        attempted_unsuccessful = tuple(i for i in got.still_queued if i not in set(got.never_attempted))
        actual = {
            "scheduled": got.scheduled,
            "preempted": got.preempted,
            "still_queued": got.still_queued,
            "never_attempted": got.never_attempted,
            "attempted_unsuccessful": attempted_unsuccessful,
        }
        for key, ids in actual.items():
            if key not in expected:
                continue
            want, have = set(expected[key] or ()), set(ids)
            if want != have:
                problems.append(f"round {got.round}: {key} missing {sorted(want - have)} unexpected {sorted(have - want)}")
    return problems
