"""One scheduling cycle: evict, put back and schedule, evict the oversubscribed, put back.

The steps follow Armada's preempting queue scheduler:
1. fair-share eviction: preemptible running jobs of queues above their protected share are
   taken off their nodes (gangs as a unit); they keep their place at the "evicted" level;
2. one pass over all queues in fair-share order puts evicted jobs back (only onto their own
   node) and schedules new jobs, which may displace evicted jobs (fair-share preemption) or
   lower-priority running jobs (urgency preemption);
3. preemptible jobs on nodes that are now over-allocated at their priority are evicted;
4. a second pass, highest priority class first, puts those back where they still fit.
Evicted jobs that were not put back are preempted.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import attrgetter

from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.fairness import DrfCost, fair_shares
from streams.scheduler.algorithm.limits import Bucket, absolute_limits, exceeds, queue_class_limits
from streams.scheduler.algorithm.model import (
    GANG_ID_ANNOTATION,
    CycleInput,
    CycleResult,
    Job,
    LimiterState,
    NodeSelectorRequirement,
    PreemptedJob,
    PriorityClass,
    QueueShare,
    RunningJob,
    ScheduledJob,
    SchedulingConfig,
    Toleration,
    Unscheduled,
)
from streams.scheduler.algorithm.nodedb import NO_PREEMPTION, NodeDb, PoolNodes
from streams.scheduler.algorithm.queue_order import CandidateGangs, rescheduling_order
from streams.scheduler.algorithm.state import JobState, RunningStates, Shape, order_key
from streams.scheduler.algorithm.submission import SUBMISSION, in_submission_order

_BY_ID = attrgetter("id")
_BY_NODE_AND_ID = attrgetter("node", "id")
_NODE = attrgetter("node")
_BY_JOB_ID = attrgetter("job.id")
# Running jobs counted per (node, levels they take, request pairs) and per (queue, class, request pairs).
_BindKey = tuple[int, int, tuple[tuple[int, int], ...]]
_HoldKey = tuple[str, str, tuple[tuple[int, int], ...]]
_REQUESTS = attrgetter("job.requests")
_SCHEDULED_PRIORITY = attrgetter("scheduled_priority")
# Compares above every queued job's order key: the queue was walked to its end.
_PAST_EVERY_KEY: tuple[object, ...] = (2,)


class _Group:
    """Queued jobs of one queue with the same shape, in queue order; states made when reached."""

    __slots__ = ("queue", "shape", "jobs", "next", "gang")

    def __init__(self, queue: str, shape: Shape, jobs: list[Job]) -> None:
        self.queue, self.shape = queue, shape
        # Class and job priority are the same for the whole group, so submission order decides.
        self.jobs = in_submission_order(jobs)
        self.next = 0
        # Gang annotations are part of the group key: (gang id, cardinality) holds for every job.
        self.gang = (jobs[0].gang_id, jobs[0].gang_cardinality)

    def key(self, index: int) -> tuple[object, ...]:
        return order_key(self.jobs[index], self.shape.pc, False, 0.0)

    def reached(self, frontier: tuple[object, ...] | None) -> int:
        """How many of the jobs not yet taken lie at or before `frontier` in queue order."""
        if frontier is None or self.next >= len(self.jobs):
            return 0
        prefix, first = self.key(self.next)[:4], frontier[:4]
        if prefix != first:
            return len(self.jobs) - self.next if first > prefix else 0
        return bisect_right(self.jobs, frontier[4:], lo=self.next, key=SUBMISSION) - self.next


def schedule(inputs: CycleInput, config: SchedulingConfig) -> CycleResult:
    """Decide one cycle. Pure: the result depends only on the arguments."""
    return _PreemptingScheduler(inputs, config).schedule()


class _PreemptingScheduler:
    def __init__(self, inputs: CycleInput, config: SchedulingConfig) -> None:
        self.inputs, self.config = inputs, config
        self.queues = {q.name: q for q in sorted(inputs.queues, key=lambda q: q.name)}
        # The node db's base the pool's last cycle left, taken while this one brings it up to date: a
        # cycle that fails midway leaves none, and the next makes it anew.
        carried = inputs.carried
        base = carried.nodes if carried is not None else None
        if carried is not None:
            carried.nodes = None
        pool = PoolNodes.of(inputs.nodes, base.pool if base is not None else None)
        grouped, queued_names = _group_queued(inputs.queued)
        # Over the running jobs with C-level walks (map, set.union): a thousand or more of them at every cycle.
        names = sorted(set(queued_names).union(pool.names, *map(_REQUESTS, inputs.running)))
        self.names = names
        self.pos = {name: i for i, name in enumerate(names)}
        self.capacity = pool.totals(map(_NODE, inputs.running))
        self.totals = [self.capacity.get(name, 0) for name in names]
        drf = [r for r in config.dominant_resource_fairness_resources if r in self.pos]
        multipliers = [config.dominant_resource_fairness_multipliers.get(r, 1.0) for r in drf]
        self.cost = DrfCost(self.totals, [self.pos[r] for r in drf], multipliers)
        priorities = {pc.priority for pc in config.priority_classes.values()}
        priorities |= {a.priority for pc in config.priority_classes.values() for a in pc.away_node_types}
        priorities |= pool.held_priorities | set(map(_SCHEDULED_PRIORITY, inputs.running))
        self.nodedb = NodeDb(pool, names, sorted(priorities), config, config.fairshare_preemption_rate is not None, base)
        self.allocation: dict[str, list[int]] = {name: [0] * len(names) for name in self.queues}
        self.class_allocation: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(names))
        self.running: list[JobState] = []
        # Running jobs taken off their nodes this cycle, by id: only these may end up preempted.
        self.evicted_running: dict[str, JobState] = {}
        self.lost: list[PreemptedJob] = []
        self.unknown: dict[str, list[str]] = defaultdict(list)
        self.shapes: dict[tuple[object, ...], Shape] = {}
        self.shapes_by_id: dict[tuple[object, ...], Shape] = {}
        self.created: list[JobState] = []
        self.unfeasible: dict[tuple[object, ...], str] = {}
        self.frontier: dict[str, tuple[object, ...]] = {}
        self._load_jobs(inputs, grouped)
        if carried is not None:
            carried.nodes = self.nodedb.base
        self._compute_shares(inputs)
        self.global_bucket = Bucket(config.scheduling_rate, inputs.limiters.scheduling, inputs.now)
        self.queue_buckets = {
            name: Bucket(config.per_queue_scheduling_rate, inputs.limiters.per_queue.get(name), inputs.now) for name in self.queues
        }
        self.fair_bucket = (
            Bucket(config.fairshare_preemption_rate, inputs.limiters.fairshare_preemption, inputs.now)
            if config.fairshare_preemption_rate is not None
            else None
        )
        self.round_limits = self._limit_pairs(absolute_limits(self._total_map(), config.maximum_resource_fraction_to_schedule))
        self.scheduled_now = [0] * len(names)
        self.termination: str = ""
        self.queue_termination: dict[str, str] = {}

    # -- set-up ---------------------------------------------------------------------------
    def _total_map(self) -> dict[str, int]:
        return dict(zip(self.names, self.totals, strict=True))

    def _limit_pairs(self, limits: dict[str, int]) -> list[tuple[int, int]]:
        return sorted((self.pos[name], amount) for name, amount in limits.items() if name in self.pos)

    def _vector(self, resources: Iterable[tuple[str, int]]) -> tuple[int, ...]:
        vec = [0] * len(self.names)
        for name, amount in resources:
            vec[self.pos[name]] += amount
        return tuple(vec)

    def _load_jobs(self, inputs: CycleInput, grouped: dict[_GroupKey, list[Job]]) -> None:
        classes = self.config.priority_classes
        gang_members: dict[str, list[JobState]] = defaultdict(list)
        index_of, shape, running = self.nodedb.index_of, self._shape, self.running
        carried = inputs.carried if inputs.carried is not None else RunningStates()
        # What a kept state's counts depend on besides its job: resource positions, node positions, levels, active queues.
        key = (tuple(self.names), self.nodedb.base.pool.ids, tuple(self.nodedb.priorities), tuple(self.queues))
        # What the counts change by this cycle: a carried node db base holds the running jobs as last counted.
        change: dict[_BindKey, int] = defaultdict(int)
        if carried.key != key:
            for bind_key, count in carried.bound.items():
                change[bind_key] -= count
            carried.key, carried.states, carried.bound, carried.held = key, {}, defaultdict(int), defaultdict(int)
        kept, bound, holding, bind_cut, active = carried.states, carried.bound, carried.held, self.nodedb.bind_cut, self.queues
        made: dict[str, tuple[RunningJob, JobState, _BindKey, _HoldKey | None]] = {}
        for run in sorted(inputs.running, key=_BY_JOB_ID):
            job = run.job
            node = index_of.get(run.node)
            pc = classes.get(job.priority_class)
            if node is None or pc is None:
                self.lost.append(PreemptedJob(job.id, run.node, reasons.node_or_class_gone(run.node, job.priority_class)))
                continue
            last = kept.get(job.id)
            if last is not None and last[0] is run and last[1].pc is pc:
                js = last[1]
                js.reset(node, run.scheduled_priority)
                made[job.id] = last
            else:
                if last is not None:
                    _uncount(last, bound, holding, change)
                js = JobState(job, shape(job, pc), True, run.started_at, node, run.scheduled_priority)
                hold_key = (js.queue, pc.name, js.pairs) if js.queue in active else None
                counted = made[job.id] = (run, js, (node, bind_cut(js), js.pairs), hold_key)
                bound[counted[2]] += 1
                change[counted[2]] += 1
                if hold_key is not None:
                    holding[hold_key] += 1
            running.append(js)
            if js.gang_id:
                gang_members[js.gang_id].append(js)
        for job_id in kept.keys() - made.keys():
            _uncount(kept[job_id], bound, holding, change)
        carried.states = made
        self.nodedb.bind_counted(bound if self.nodedb.fresh else change)
        self._account_counted(holding)
        self._hold(inputs.stranded)
        # What the running jobs hold per queue and class (stranded ones too) is also their part of the queues' demand.
        self.running_demand = {key: list(held) for key, held in self.class_allocation.items()}
        for members in gang_members.values():
            for js in members:
                js.gang_size = len(members)
        self.running_gangs = dict(gang_members)
        self._hold(inputs.allocated)
        groups = []
        for (queue, class_name, *_), jobs in grouped.items():
            pc = classes.get(class_name)
            if pc is None:
                self.unknown[reasons.unknown_class(class_name)].extend(j.id for j in jobs)
            elif queue not in self.queues:
                self.unknown[reasons.inactive_queue(queue)].extend(j.id for j in jobs)
            else:
                groups.append(_Group(queue, self._shape(jobs[0], pc), jobs))
        groups.sort(key=lambda g: g.key(0))
        self.groups = groups

    def _hold(self, held: Mapping[str, Mapping[str, Mapping[str, int]]]) -> None:
        """Count ``held`` (per queue and class, on no node of the cycle) in the active queues' allocation;
        a class not configured has no limits to count it against, and is left out as its running jobs are."""
        classes = self.config.priority_classes
        for queue, by_class in held.items():
            if queue in self.queues:
                for class_name, resources in by_class.items():
                    if class_name not in classes:
                        continue
                    pairs = [(self.pos[name], amount) for name, amount in resources.items() if name in self.pos]
                    for i, amount in pairs:
                        self.allocation[queue][i] += amount
                        self.class_allocation[(queue, class_name)][i] += amount

    def _shape(self, job: Job, pc: PriorityClass) -> Shape:
        # Jobs mostly share their requests and constraints as objects (streams.domain.shared):
        # those are found by identity first. The inputs hold every job for the whole cycle, so no
        # id is reused while this is looked at.
        same = (pc.name, id(job.requests), id(job.node_selector), id(job.tolerations), id(job.affinity))
        shape = self.shapes_by_id.get(same)
        if shape is None:
            shape = self.shapes_by_id[same] = self._shape_by_value(job, pc)
        return shape

    def _shape_by_value(self, job: Job, pc: PriorityClass) -> Shape:
        key = (pc.name, tuple(sorted(job.requests.items())), tuple(sorted(job.node_selector.items())), job.tolerations, job.affinity)
        shape = self.shapes.get(key)
        if shape is None:
            shape = Shape(job, pc, self._vector(job.requests.items()))
            self.shapes[key] = shape
        return shape

    def _account(self, js: JobState, sign: int) -> None:
        queue_alloc = self.allocation[js.queue]
        class_alloc = self.class_allocation[(js.queue, js.pc.name)]
        for i, amount in js.pairs:
            queue_alloc[i] += sign * amount
            class_alloc[i] += sign * amount

    def _account_counted(self, held: dict[_HoldKey, int]) -> None:
        """`_account` (+1) of every running job of an active queue, given as counts per (queue, class, request)."""
        for (queue, class_name, pairs), count in held.items():
            queue_alloc = self.allocation[queue]
            class_alloc = self.class_allocation[(queue, class_name)]
            for i, amount in pairs:
                queue_alloc[i] += count * amount
                class_alloc[i] += count * amount

    def _compute_shares(self, inputs: CycleInput) -> None:
        totals = self._total_map()
        self.class_limits = {
            (q, pc.name): self._limit_pairs(absolute_limits(totals, queue_class_limits(queue, pc)))
            for q, queue in self.queues.items()
            for pc in self.config.priority_classes.values()
        }
        if inputs.demand is not None:
            capped = {q: list(self._vector(inputs.demand.get(q, {}).items())) for q in self.queues}
        else:
            by_class: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(self.names), self.running_demand)
            for group in self.groups:
                demand = by_class[(group.queue, group.shape.pc.name)]
                for i, amount in group.shape.pairs:
                    demand[i] += amount * len(group.jobs)
            capped = {q: [0] * len(self.names) for q in self.queues}
            for (q, pc_name), demand in sorted(by_class.items()):
                for i, limit in self.class_limits[(q, pc_name)]:
                    demand[i] = min(demand[i], limit)
                capped[q] = [a + b for a, b in zip(capped[q], demand, strict=True)]
        names = list(self.queues)
        self.share_before = {q: self.cost.unweighted(self.allocation[q]) for q in names}
        raw, adjusted = fair_shares([self.queues[q].weight for q in names], [self.cost.unweighted(capped[q]) for q in names])
        self.fair_share = dict(zip(names, raw, strict=True))
        self.adjusted_share = dict(zip(names, adjusted, strict=True))

    # -- the cycle --------------------------------------------------------------------------
    def schedule(self) -> CycleResult:
        evicted = self._evict_for_fair_share()
        self._pass(evicted, consider_priority=False, first=True)
        evicted = self._evict_oversubscribed()
        if evicted:
            self._pass(evicted, consider_priority=True, first=False)
        return self._result()

    def _evict_for_fair_share(self) -> list[JobState]:
        config = self.config
        if not config.enable_fairshare_preemption:
            return []
        over = set()
        for q in self.queues:
            fair = max(self.adjusted_share[q], self.fair_share[q])
            fraction = self.cost.unweighted(self.allocation[q]) / fair if fair > 0 else math.inf
            if fraction > config.protected_fraction_of_fair_share:
                over.add(q)
        if not over:  # no queue above its protected share: nothing to walk (most cycles of a steady state)
            return []
        chosen_nodes = self._nodes_open_to_eviction()
        victims = [
            js for js in sorted(self.running, key=_BY_NODE_AND_ID) if js.queue in over and js.pc.preemptible and js.node in chosen_nodes
        ]
        return self._evict(victims, self.running_gangs, reasons.FAIR_SHARE_PREEMPTED)

    def _nodes_open_to_eviction(self) -> set[int]:
        """Nodes whose jobs may be evicted this cycle; a random subset, seeded, when configured."""
        every = range(len(self.nodedb.nodes))
        probability = self.config.node_eviction_probability
        if probability >= 1.0:
            return set(every)
        rng = random.Random(self.inputs.seed)
        return {n for n in every if rng.random() < probability}

    def _evict(self, victims: list[JobState], gangs: dict[str, list[JobState]], reason: str) -> list[JobState]:
        chosen = {js.id: js for js in victims}
        for js in victims:
            for member in gangs.get(js.gang_id, ()) if js.gang_id else ():
                if member.bound and not member.evicted:
                    chosen.setdefault(member.id, member)
        evicted = sorted(chosen.values(), key=_BY_ID)
        counts: dict[str, int] = defaultdict(int)
        for js in evicted:
            if js.gang_id:
                counts[js.gang_id] += 1
        for js in evicted:
            if js.running:
                self.evicted_running[js.id] = js
            self.nodedb.evict(js)
            if js.queue in self.queues:
                self._account(js, -1)
            js.reason = reason if js.running else js.reason
            js.gang_size = counts[js.gang_id] if js.gang_id else 1
        return evicted

    def _evict_oversubscribed(self) -> list[JobState]:
        over = self.nodedb.oversubscribed_levels()
        if not over:
            return []
        nodedb = self.nodedb
        bound = [js for js in self.running + self.created if js.bound and not js.evicted]
        victims = [
            js
            for js in bound
            if js.node in over
            and js.pc.preemptible
            and js.queue in self.queues
            and nodedb.priorities[nodedb.level(js.sched_priority) - 1] in over[js.node]
        ]
        gangs: dict[str, list[JobState]] = defaultdict(list)
        for js in bound:
            if js.gang_id:
                gangs[js.gang_id].append(js)
        return self._evict(victims, gangs, reasons.URGENCY_PREEMPTED)

    def _pass(self, states: Sequence[JobState], *, consider_priority: bool, first: bool) -> None:
        by_queue: dict[str, list[JobState]] = defaultdict(list)
        for js in states:
            by_queue[js.queue].append(js)
        for items in by_queue.values():
            items.sort(key=lambda s: (not s.evicted, s.order_key))
        queues: list[tuple[str, float, float, Iterable[JobState]]] = [
            (q, self.queues[q].weight, self._budget(q), by_queue.get(q, [])) for q in self.queues
        ]
        if first:
            streams = {q: self._queued_stream(q) for q in self.queues}
            queues = [(q, w, b, _chain(items, streams[q])) for q, w, b, items in queues]
            evicted_only = [(q, w, b, by_queue.get(q, [])) for q, w, b, _ in queues]
            allocation = {q: list(v) for q, v in self.allocation.items()}
            prefer, cost = self.config.enable_prefer_large_job_ordering, self.cost
            # Not a closure over self: the node db holds it, and self holding the node db would make
            # the cycle's every job state garbage for the collector, not freed when the cycle ends.
            self.nodedb.reset_evicted_order(lambda: rescheduling_order(evicted_only, allocation, cost, prefer))
        else:
            self.nodedb.reset_evicted_order(None)
        # Only the first pass is followed by an oversubscription eviction.
        self.nodedb.displacement_follows = first
        unfeasible = self.unfeasible
        unfeasible.clear()

        def skip(js: JobState) -> bool:
            # An empty dict first: looking a key up hashes its nested tuples, for every job of the pass.
            reason = unfeasible.get(js.scheduling_key) if first and unfeasible else None
            if reason is None:
                return False
            js.attempted, js.reason = True, reason
            return True

        candidates = CandidateGangs(
            queues,
            self.allocation,
            self.cost,
            consider_priority=consider_priority,
            prefer_large=self.config.enable_prefer_large_job_ordering,
            lookback=self.config.max_queue_lookback,
            skip=skip,
        )
        while (cursor := candidates.pop()) is not None:
            gang = cursor.gang
            assert gang is not None
            if self.fair_bucket is not None and self.fair_bucket.tokens < 1:
                self.nodedb.fair_preemption_enabled = False
            reason = self._try_gang(cursor.name, gang)
            if reason in reasons.TERMINAL:
                self.termination = reason
                candidates.only_evicted()
            elif reason in reasons.QUEUE_TERMINAL:
                self.queue_termination[cursor.name] = reason
                candidates.only_evicted(cursor.name)
            elif reason in reasons.PROPERTY_OF_GANG and first and len(gang) == 1 and not gang[0].evicted:
                unfeasible.setdefault(gang[0].scheduling_key, reason)
            candidates.done(cursor)
        self.nodedb.fair_preemption_enabled = True

    def _queued_stream(self, queue: str) -> Iterator[JobState]:
        """The queue's new jobs in queue order, merging its groups; with no lookback limit a group
        whose requirements proved unschedulable is dropped whole (reported in bulk at the end)."""
        groups = [g for g in self.groups if g.queue == queue]
        heap = [(g.key(0), i) for i, g in enumerate(groups)]
        heapq.heapify(heap)
        bulk_skip = not self.config.max_queue_lookback
        while heap:
            key, i = heapq.heappop(heap)
            group = groups[i]
            if bulk_skip and self.unfeasible and group.shape.scheduling_key in self.unfeasible:
                continue
            job = group.jobs[group.next]
            group.next += 1
            if group.next < len(group.jobs):
                heapq.heappush(heap, (group.key(group.next), i))
            self.frontier[queue] = key
            js = JobState(job, group.shape, False, 0.0, None, group.shape.pc.priority, key, group.gang)
            self.created.append(js)
            yield js
        self.frontier[queue] = _PAST_EVERY_KEY

    def _budget(self, queue: str) -> float:
        return self.adjusted_share[queue] / self.queues[queue].weight

    # -- one gang ---------------------------------------------------------------------------
    def _try_gang(self, queue: str, gang: list[JobState]) -> str:
        """Try to place the whole gang; returns "" on success, else why not."""
        new = not gang[0].evicted if len(gang) == 1 else not all(js.evicted for js in gang)
        if new and exceeds(self.scheduled_now, self.round_limits):
            for js in gang:
                js.reason = reasons.ROUND_LIMIT
            return reasons.ROUND_LIMIT
        for js in gang:
            js.attempted = True
        for js in gang:
            self._account(js, +1)
        reason = self._check_constraints(queue, gang) if new else ""
        if not reason:
            reason = self._place_gang(gang)
        if reason:
            for js in gang:
                self._account(js, -1)
                if not js.running or not js.reason:
                    js.reason = reason
            return reason
        for js in gang:
            if not js.bound or js.evicted:
                self._account(js, -1)
                js.reason = reasons.JOB_DOES_NOT_FIT
        if new:
            self.global_bucket.reserve(len(gang))
            self.queue_buckets[queue].reserve(len(gang))
            for js in gang:
                if js.bound and not js.evicted:
                    for i, amount in js.pairs:
                        self.scheduled_now[i] += amount
        return ""

    def _check_constraints(self, queue: str, gang: list[JobState]) -> str:
        size = len(gang)
        refusal = _rate_refusal(
            self.global_bucket,
            size,
            reasons.GLOBAL_RATE_LIMIT,
            reasons.GANG_EXCEEDS_GLOBAL_BURST,
            reasons.GANG_EXCEEDS_GLOBAL_RATE,
        )
        if refusal:
            return refusal
        if self.queues[queue].cordoned:
            return reasons.QUEUE_CORDONED
        refusal = _rate_refusal(
            self.queue_buckets[queue],
            size,
            reasons.QUEUE_RATE_LIMIT,
            reasons.GANG_EXCEEDS_QUEUE_BURST,
            reasons.GANG_EXCEEDS_QUEUE_RATE,
        )
        if refusal:
            return refusal
        pc_name = gang[0].pc.name
        if exceeds(self.class_allocation[(queue, pc_name)], self.class_limits[(queue, pc_name)]):
            return reasons.QUEUE_CLASS_LIMIT
        return ""

    def _place_gang(self, gang: list[JobState]) -> str:
        nodedb = self.nodedb
        label = gang[0].job.gang_uniformity_label if gang[0].gang_id else ""
        if not label and len(gang) == 1:
            ok, _, _, displaced = self._place(gang, {})
            if not ok:
                return reasons.JOB_DOES_NOT_FIT
            self._charge(displaced)
            return ""
        if label and label not in self.config.indexed_node_labels:
            return reasons.uniformity_not_indexed(label)
        selectors = [{label: value} for value in nodedb.gang_label_values(label)] if label else [{}]
        if not selectors:
            return reasons.uniformity_no_nodes(label)
        if len(selectors) == 1:
            nodedb.begin()
            ok, _, _, displaced = self._place(gang, selectors[0])
            if not ok:
                nodedb.rollback()
                return reasons.GANG_DOES_NOT_FIT
            nodedb.commit()
            self._charge(displaced)
            return ""
        # Each label value in turn: the first that takes the whole gang without displacing anyone,
        # else the one that placed most at the lowest preempted-at priority.
        best: tuple[int, float, dict[str, str]] | None = None
        for selector in selectors:
            nodedb.begin()
            ok, placed, mean, displaced = self._place(gang, selector)
            if ok and placed == len(gang) and mean == NO_PREEMPTION:  # so nobody was displaced
                nodedb.commit()
                self._charge(displaced)
                return ""
            nodedb.rollback()
            if ok and (best is None or (placed, -mean) > (best[0], -best[1])):
                best = (placed, mean, selector)
        if best is None:
            return reasons.GANG_DOES_NOT_FIT
        nodedb.begin()
        self._charge(self._place(gang, best[2])[3])
        nodedb.commit()
        return ""

    def _charge(self, displaced: int) -> None:
        """Count fair-share preemptions against their rate limit, only for placements that are
        kept: the trial placements tried for each label value and rolled back displace nobody."""
        if self.fair_bucket is not None:
            self.fair_bucket.reserve(displaced)

    def _place(self, gang: list[JobState], selector: dict[str, str]) -> tuple[bool, int, float, int]:
        """Bind members one by one, on nodes matching ``selector``;
        ok when at least the gang's minimum were placed. Also how many were placed, their mean
        preempted-at priority and how many evicted jobs they displaced."""
        nodedb = self.nodedb
        minimum = gang[0].job.gang_min_cardinality if gang[0].gang_id and not gang[0].evicted else len(gang)
        placed, preempted_at, displaced = 0, 0.0, 0
        for js in gang:
            placement = nodedb.select(js, selector)
            if placement is None:
                if minimum >= len(gang):
                    return False, placed, 0.0, displaced
                continue
            nodedb.bind(js, placement)
            placed += 1
            preempted_at += placement.preempted_at
            displaced += placement.displaced
        if placed < minimum:
            return False, placed, 0.0, displaced
        return True, placed, preempted_at / max(placed, 1), displaced

    # -- result -----------------------------------------------------------------------------
    def _result(self) -> CycleResult:
        nodes = self.nodedb.nodes
        scheduled = tuple(
            ScheduledJob(js.id, nodes[js.node].id, js.sched_priority)  # type: ignore[index]
            for js in sorted(self.created, key=_BY_ID)
            if js.bound and not js.evicted
        )
        preempted = [
            PreemptedJob(js.id, nodes[js.node].id, js.reason or reasons.FAIR_SHARE_PREEMPTED)  # type: ignore[index]
            for js in self.evicted_running.values()
            if not js.bound or js.evicted
        ] + self.lost
        incomplete = self._incomplete_gangs()
        left: dict[tuple[str, bool], list[str]] = defaultdict(list)
        for js in self.created:
            if not (js.bound and not js.evicted):
                left[(js.reason or self._not_considered(js.queue, js.gang_id, incomplete), js.attempted)].append(js.id)
        for group in self.groups:
            if group.next >= len(group.jobs):
                continue
            skipped_reason = self.unfeasible.get(group.shape.scheduling_key)
            seen = group.next + (group.reached(self.frontier.get(group.queue)) if skipped_reason else 0)
            if seen > group.next:
                left[(skipped_reason, True)].extend(j.id for j in group.jobs[group.next : seen])  # type: ignore[index]
            if seen < len(group.jobs):
                why = self._not_considered(group.queue, group.jobs[0].gang_id, incomplete)
                left[(why, False)].extend(j.id for j in group.jobs[seen:])
        for why, ids in self.unknown.items():
            left[(why, False)].extend(ids)
        unscheduled = tuple(Unscheduled(reason, attempted, tuple(sorted(ids))) for (reason, attempted), ids in sorted(left.items()))
        limiters = LimiterState(
            scheduling=self.global_bucket.state(self.inputs.now),
            per_queue={q: s for q, b in sorted(self.queue_buckets.items()) if (s := b.state(self.inputs.now)) is not None},
            fairshare_preemption=self.fair_bucket.state(self.inputs.now) if self.fair_bucket else None,
        )
        shares = tuple(
            QueueShare(
                q,
                self.fair_share[q],
                self.adjusted_share[q],
                self.cost.unweighted(self.allocation[q]),
                {name: amount for name, amount in zip(self.names, self.allocation[q], strict=True) if amount},
                self.share_before[q],
            )
            for q in self.queues
        )
        return CycleResult(
            scheduled=scheduled,
            preempted=tuple(sorted(preempted, key=lambda p: p.job_id)),
            unscheduled=unscheduled,
            limiters=limiters,
            shares=shares,
            capacity=dict(sorted(self.capacity.items())),
        )

    def _incomplete_gangs(self) -> dict[str, tuple[int, int]]:
        counts: dict[str, int] = defaultdict(int)
        cardinality: dict[str, int] = {}
        for group in self.groups:
            gang_id = group.jobs[0].gang_id
            if gang_id:
                counts[gang_id] += len(group.jobs)
                cardinality[gang_id] = group.jobs[0].gang_cardinality
        return {g: (n, cardinality[g]) for g, n in counts.items() if n < cardinality[g]}

    def _not_considered(self, queue: str, gang_id: str, incomplete: dict[str, tuple[int, int]]) -> str:
        if gang_id in incomplete:
            return reasons.gang_incomplete(gang_id, *incomplete[gang_id])
        why = self.queue_termination.get(queue) or self.termination
        if why:
            return reasons.not_considered(why)
        if self.config.max_queue_lookback:
            return reasons.LOOKBACK
        return reasons.not_considered("round ended")


# (queue, class, priority, request items, selector items, tolerations, affinity, gang annotations)
_GroupKey = tuple[
    str,
    str,
    float,
    tuple[tuple[str, int], ...],
    tuple[tuple[str, str], ...],
    tuple[Toleration, ...],
    tuple[tuple[NodeSelectorRequirement, ...], ...],
    tuple[tuple[str, str], ...],
]


def _group_queued(queued: Iterable[Job]) -> tuple[dict[_GroupKey, list[Job]], set[str]]:
    """Queued jobs by (queue, class, priority, request items, selector, tolerations, affinity,
    gang annotations), in order of first appearance: interchangeable jobs share a group. Also
    the resource names they request, read off the groups so that a million jobs are walked once."""
    grouped: dict[_GroupKey, list[Job]] = defaultdict(list)
    for job in queued:
        annotations, selector = job.annotations, job.node_selector
        gang = annotations.get(GANG_ID_ANNOTATION, "") if annotations else ""
        grouped[
            (
                job.queue,
                job.priority_class,
                job.priority,
                tuple(job.requests.items()),
                tuple(selector.items()) if selector else (),
                job.tolerations,
                job.affinity,
                tuple(annotations.items()) if gang else (),
            )
        ].append(job)
    return grouped, {name for key in grouped for name, _ in key[3]}


def _uncount(
    kept: tuple[RunningJob, JobState, _BindKey, _HoldKey | None],
    bound: dict[_BindKey, int],
    held: dict[_HoldKey, int],
    change: dict[_BindKey, int],
) -> None:
    """Take a kept running job's state out of the kept counts (it no longer runs, or runs anew)."""
    _, _, bind_key, hold_key = kept
    change[bind_key] -= 1
    bound[bind_key] -= 1
    if not bound[bind_key]:
        del bound[bind_key]
    if hold_key is not None:
        held[hold_key] -= 1
        if not held[hold_key]:
            del held[hold_key]


def _chain(first: Iterable[JobState], rest: Iterator[JobState]) -> Iterator[JobState]:
    yield from first
    yield from rest


def _rate_refusal(bucket: Bucket, size: int, exhausted: str, over_burst: str, over_rate: str) -> str:
    """Why a token bucket refuses a gang of ``size`` ("" if it admits it): a gang needs a token
    per member, an empty bucket stops everything behind it, and a gang larger than the burst
    can never be admitted."""
    if bucket.tokens <= 0:
        return exhausted
    if bucket.burst < size:
        return over_burst
    if bucket.tokens < size:
        return over_rate
    return ""
