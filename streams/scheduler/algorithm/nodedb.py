"""Node index: capacity per priority level, tightest-fit node search and preemption.

Each node keeps, for every tracked priority level, the resources still allocatable to a job
scheduled at that level: a job bound at priority p consumes capacity at every level <= p, so
higher-priority jobs see lower-priority preemptible jobs as free space (urgency preemption).
Level 0 is the "evicted" level below every priority: evicted jobs still hold capacity there,
so a fit at level 0 needs no preemption at all.

What a cycle's node db starts from, its nodes' capacity per level with the running jobs bound,
their level indices and the nodes each kind of job may use, is carried to the pool's next cycle
(`NodeBase`, kept with the running jobs' states in `RunningStates`) and brought up to date there by
the nodes and running jobs that changed: at 1,000 nodes making it anew was most of an idle cycle.
A cycle never writes the base: it copies a node's rows when it first changes them (`NodeDb._mark`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter, is_
from typing import NamedTuple

from streams.scheduler.algorithm.matching import static_mismatch
from streams.scheduler.algorithm.model import Node, SchedulingConfig, Toleration
from streams.scheduler.algorithm.state import JobState, Pairs

EVICTED_LEVEL = 0
# Preempted-at priority of a placement that displaced nobody.
NO_PREEMPTION = -(2**31)
_BY_ID = attrgetter("id")
# Running jobs counted per (node, levels they take, request pairs) (`RunningStates.bound`).
Counts = Mapping[tuple[int, int, Pairs], int]


class Placement(NamedTuple):
    """Where a job goes, at what priority. A named tuple: one is made for every job placed, and a
    frozen dataclass costs several times as much to make."""

    node: int
    priority: int
    preempted_at: int
    # Evicted jobs this placement took the place of (fair-share preemptions).
    displaced: int = 0


class _LevelIndex:
    """Nodes sorted by (allocatable rounded to index resolution, node order) at one level."""

    __slots__ = ("keys", "key_of", "_make")

    def __init__(self, make_key: Callable[[int], tuple[int, ...]], key_of: list[tuple[int, ...]], keys: list[tuple[int, ...]]) -> None:
        self._make = make_key
        self.key_of = key_of
        self.keys = keys

    @classmethod
    def made(cls, make_key: Callable[[int], tuple[int, ...]], n_nodes: int) -> _LevelIndex:
        key_of = [make_key(n) for n in range(n_nodes)]
        return cls(make_key, key_of, sorted(key_of))

    def copy(self, make_key: Callable[[int], tuple[int, ...]]) -> _LevelIndex:
        """The same keys, kept up to date from then on with ``make_key``."""
        return _LevelIndex(make_key, list(self.key_of), list(self.keys))

    def update(self, node: int) -> None:
        old = self.key_of[node]
        new = self._make(node)
        if new != old:
            keys = self.keys
            del keys[bisect_left(keys, old)]
            insort(keys, new)
            self.key_of[node] = new


def _key_maker(alloc: list[list[list[int]]], lvl: int, indexed: tuple[tuple[int, int], ...]) -> Callable[[int], tuple[int, ...]]:
    """A node's key at ``lvl``: its allocatable of each indexed resource at index resolution, then the node.
    Made for every job bound, so written out for the usual two or three indexed resources (a
    comprehension over them costs five times as much)."""
    if len(indexed) == 2:
        (i0, r0), (i1, r1) = indexed

        def two(node: int) -> tuple[int, ...]:
            row = alloc[node][lvl]
            return (row[i0] // r0, row[i1] // r1, node)

        return two
    if len(indexed) == 3:
        (i0, r0), (i1, r1), (i2, r2) = indexed

        def three(node: int) -> tuple[int, ...]:
            row = alloc[node][lvl]
            return (row[i0] // r0, row[i1] // r1, row[i2] // r2, node)

        return three

    def any_number(node: int) -> tuple[int, ...]:
        row = alloc[node][lvl]
        return (*[row[i] // res for i, res in indexed], node)

    return any_number


class PoolNodes:
    """A cycle's nodes in id order, with what the cycle reads off all of them: their resource names,
    capacity per name, the unschedulable ones and the priorities unmanaged pods hold them at. The worker
    hands a pool's cycles the same `Node` objects while a node is unchanged (`pool_jobs.executor_nodes`),
    so these are made again only when some node object is not the last cycle's (`of`)."""

    __slots__ = ("given", "nodes", "ids", "index_of", "names", "capacity", "unschedulable", "held_priorities")

    def __init__(self, given: Sequence[Node]) -> None:
        self.given = tuple(given)
        self.nodes = sorted(given, key=_BY_ID)
        self.ids = tuple(node.id for node in self.nodes)
        self.index_of = {ident: i for i, ident in enumerate(self.ids)}
        self.names = frozenset().union(*(node.resources for node in self.nodes))
        self.capacity = {name: sum(node.resources.get(name, 0) for node in self.nodes) for name in self.names}
        self.unschedulable = tuple(node for node in self.nodes if node.unschedulable)
        self.held_priorities = frozenset(held.priority for node in self.nodes for held in node.allocated)

    def totals(self, occupied: Iterable[str]) -> Mapping[str, int]:
        """The resources costs, fair shares and the per-queue and round limits are fractions of: the
        capacity without the unschedulable (cordoned) nodes no job runs on (``occupied``: the ids of
        the nodes jobs run on, read only when some node is unschedulable). Armada leaves those out of
        its node db "so the resource of the node is not counted for fairshare" (`populateNodeDb`); a
        cordoned node that jobs run on stays, and counts, as its evicted jobs may go back onto it.
        The one reckoning of a pool's capacity: the cycle record, the metrics and what-if show it."""
        if not self.unschedulable:
            return self.capacity
        occupied = set(occupied)
        totals = dict(self.capacity)
        for node in self.unschedulable:
            if node.id not in occupied:
                for name, amount in node.resources.items():
                    totals[name] -= amount
        return totals

    @classmethod
    def of(cls, given: Sequence[Node], last: PoolNodes | None) -> PoolNodes:
        """``last`` if ``given`` are its very node objects in its order, else made anew."""
        if last is not None and len(given) == len(last.given) and all(map(is_, given, last.given)):
            return last
        return cls(given)


class NodeBase:
    """A pool's nodes as its cycle's node db starts from them: the capacity still allocatable per node and
    level with the running jobs bound and unmanaged pods' holds taken, jobs in place per node and top level,
    the nodes over-allocated at some priority, level indices and, per kind of job, the nodes it may use.
    Carried from cycle to cycle (`RunningStates.nodes`) for the same resource names, priority levels,
    indexed resources and node ids; brought up to date by the running jobs that came and went (`bind`) and
    the nodes that changed (`refresh`), so that it always equals the base made anew. A cycle only reads it."""

    __slots__ = (
        "pool",
        "key",
        "priorities",
        "n_levels",
        "position",
        "cuts",
        "totals",
        "alloc",
        "tops",
        "over",
        "indices",
        "home_masks",
        "masks",
        "label_values",
    )

    def __init__(self, pool: PoolNodes, resource_names: Sequence[str], priorities: list[int], indexed: tuple[tuple[int, int], ...]) -> None:
        self.pool = pool
        self.key = (tuple(resource_names), tuple(priorities), indexed)
        self.priorities = priorities
        self.n_levels = 1 + len(priorities)
        self.position = {name: i for i, name in enumerate(resource_names)}
        self.cuts: dict[int, int] = {}
        self.totals = [tuple(node.resources.get(name, 0) for name in resource_names) for node in pool.nodes]
        self.alloc = [[list(total) for _ in range(self.n_levels)] for total in self.totals]
        # How many jobs are in place (bound, not evicted) on each node with each level as their top
        # one, at [node * n_levels + level]: one flat list, not one per node (10,000s of nodes).
        self.tops = [0] * (len(pool.nodes) * self.n_levels)
        self.indices: dict[int, _LevelIndex] = {}
        # Per kind of job, its nodes (`NodeDb.mask`): those of the last cycle that used them.
        self.home_masks: dict[tuple[object, ...], bytearray] = {}
        self.masks: dict[tuple[object, ...], bytearray] = {}
        self.label_values: dict[str, list[str]] = {}
        for i, node in enumerate(pool.nodes):
            self._hold(i, node, -1)
        self.over = {i for i in range(len(pool.nodes)) if self._over(i)}

    def cut(self, priority: int) -> int:
        """Number of levels a job bound at `priority` consumes (evicted level included)."""
        cut = self.cuts.get(priority)
        if cut is None:  # asked for every bind and eviction, of a handful of priorities
            cut = self.cuts[priority] = 1 + bisect_right(self.priorities, priority)
        return cut

    def _mark(self, node: int, start: int, stop: int, pairs: Pairs, sign: int) -> None:
        rows = self.alloc[node]
        for lvl in range(start, stop):
            row = rows[lvl]
            for i, amount in pairs:
                row[i] += sign * amount

    def _hold(self, i: int, node: Node, sign: int) -> None:
        """Take (-1) or give back (+1) what unmanaged pods hold on the node, at the levels of their priority."""
        for held in node.allocated:
            pairs = tuple((self.position[name], amount) for name, amount in held.resources.items() if amount and name in self.position)
            self._mark(i, 0, self.cut(held.priority), pairs, sign)

    def _over(self, node: int) -> bool:
        rows = self.alloc[node]
        return any(v < 0 for lvl in range(1, self.n_levels) for v in rows[lvl])

    def _settle(self, nodes: set[int]) -> None:
        """Bring the level indices and the over-allocated nodes up to date after ``nodes`` changed."""
        for node in sorted(nodes):
            for index in self.indices.values():
                index.update(node)
            if self._over(node):
                self.over.add(node)
            else:
                self.over.discard(node)

    def bind(self, counts: Counts) -> None:
        """Take (positive counts) or give back (negative) the capacity of running jobs counted per
        (node, cut, request pairs), as `NodeDb.bind` would for each; summed per node and cut first, so
        each node's rows change once."""
        taken: dict[tuple[int, int], list[int]] = {}
        tops, n_levels, n_res = self.tops, self.n_levels, len(self.position)
        for (node, cut, pairs), count in counts.items():
            if not count:
                continue
            tops[node * n_levels + cut - 1] += count
            total = taken.get((node, cut))
            if total is None:
                total = taken[(node, cut)] = [0] * n_res
            for i, amount in pairs:
                total[i] += count * amount
        for (node, cut), total in taken.items():
            self._mark(node, 0, cut, tuple((i, amount) for i, amount in enumerate(total) if amount), -1)
        self._settle({node for node, _ in taken})

    def refresh(self, pool: PoolNodes) -> None:
        """Take ``pool``'s nodes (the same ids, in the same order): a node that is not equal to the one it
        replaces changes its rows by the difference in capacity and unmanaged pods' holds; when its labels,
        taints or schedulability changed (`_static`), the nodes each kind of job may use are made anew."""
        if pool is self.pool:
            return
        changed: set[int] = set()
        static = False
        names = self.key[0]
        for i, (old, new) in enumerate(zip(self.pool.nodes, pool.nodes, strict=True)):
            if old is new or old == new:
                continue
            changed.add(i)
            total = tuple(new.resources.get(name, 0) for name in names)
            grown = tuple((r, b - a) for r, (a, b) in enumerate(zip(self.totals[i], total, strict=True)) if a != b)
            self._mark(i, 0, self.n_levels, grown, +1)
            self.totals[i] = total
            self._hold(i, old, +1)
            self._hold(i, new, -1)
            static = static or _static(old) != _static(new)
        self.pool = pool
        self._settle(changed)
        if static:
            self.home_masks, self.masks, self.label_values = {}, {}, {}

    def index(self, lvl: int) -> _LevelIndex:
        index = self.indices.get(lvl)
        if index is None:
            index = self.indices[lvl] = _LevelIndex.made(_key_maker(self.alloc, lvl, self.key[2]), len(self.pool.nodes))
        return index


def _static(node: Node) -> tuple[object, ...]:
    """What of a node the nodes each kind of job may use depend on (`NodeDb.mask`, `NodeDb.gang_label_values`)."""
    return (node.labels, node.taints, node.unschedulable)


class NodeDb:
    def __init__(
        self,
        pool: PoolNodes,
        resource_names: Sequence[str],
        priorities: Sequence[int],
        config: SchedulingConfig,
        track_held: bool,
        carried: NodeBase | None = None,
    ) -> None:
        """``carried``: the base the pool's last cycle left (`NodeBase`), used if made for the same resource
        names, levels, indexed resources and node ids, else made anew; either way `base`, which the next
        cycle takes. `fresh` says which: a carried base holds the running jobs the last cycle bound."""
        self.nodes = pool.nodes
        self.index_of = pool.index_of
        self.priorities = sorted(set(priorities))
        self.n_levels = 1 + len(self.priorities)
        self.config = config
        position = {name: i for i, name in enumerate(resource_names)}
        self.indexed = tuple((position[name], res) for name, res in config.indexed_resources if name in position)
        key = (tuple(resource_names), tuple(self.priorities), self.indexed)
        self.fresh = carried is None or carried.key != key or carried.pool.ids != pool.ids
        if carried is None or self.fresh:
            carried = NodeBase(pool, resource_names, self.priorities, self.indexed)
        else:
            carried.refresh(pool)
        base = self.base = carried
        # Number of levels a job bound at a priority consumes (evicted level included): the base's, bound
        # here so that the hot path (every bind, eviction and running job loaded) makes one call.
        self.cut: Callable[[int], int] = base.cut
        # The base's rows per node, each copied when this cycle first changes it (`_mark`).
        self.alloc = list(base.alloc)
        self._copied = bytearray(len(self.nodes))
        self._touched: list[int] = []
        self.tops = list(base.tops)
        self._indices: dict[int, _LevelIndex] = {}
        # The nodes each kind of job may use: those this cycle asks for are kept for the next (in the
        # base's new dicts), the last cycle's are taken from while asked for (and dropped after).
        self._masks: dict[tuple[object, ...], bytearray] = {}
        self._last_masks = base.masks
        # The masks of jobs placed at their own class's priority with nothing added, by `Shape.static_key`.
        self._home_masks: dict[tuple[object, ...], bytearray] = {}
        self._last_home_masks = base.home_masks
        base.masks, base.home_masks = self._masks, self._home_masks
        self._label_values = base.label_values
        # The last fit found at the evicted level: (request pairs, mask, node), kept while the node db
        # changed only by binding jobs of those pairs on that node (`bind`). A job of the same pairs
        # and mask goes there again while it fits: the nodes before it in the level's key order are
        # unchanged and still do not fit, and binding only lowered its own key.
        # The fourth item, when not None, is (resource, amount): the free amount of the first indexed
        # resource the node must keep to be found at all (`_lowest_key`), where that exceeds the request.
        self._last_fit: tuple[Pairs, bytearray, int, tuple[int, int] | None] | None = None
        # Placements before each change (job, node, priority, bound, evicted) while in a transaction.
        self._journal: list[tuple[JobState, int | None, int, bool, bool]] | None = None
        # Capacity evicted jobs freed per level, so that when fair-share preemption is off
        # urgency preemption cannot take their places either.
        n_res = len(resource_names)
        self.held = [[[0] * n_res for _ in range(self.n_levels)] for _ in self.nodes] if track_held else None
        self.fair_preemption_enabled = True
        # Whether an oversubscription eviction still follows the current pass. While one does, a
        # job going back onto its node need only fit at its own level: lower-priority jobs it
        # over-allocates are displaced by that eviction (urgency). The cycle's last pass has no
        # eviction after it, so there it must also leave room for every job in place below it.
        self.displacement_follows = True
        self.evicted_order: Callable[[], list[JobState]] | None = None
        self._order: list[JobState] | None = None
        # Entries at the end of `_order` no longer evicted and bound, skipped for good; a
        # rollback restores the count, since the jobs it restores may be among them.
        self._trimmed = 0
        self._trimmed_at_begin = 0
        # Nodes whose running jobs (with unmanaged pods) exceed their capacity, found once the running jobs
        # are bound (`bind_counted`). As in Armada, such a node takes no new job this cycle and its evicted
        # jobs always go back onto it: a momentary drop in a node's capacity must not preempt its jobs.
        self.over_allocated: frozenset[int] = frozenset()
        # The masks with the over-allocated nodes taken out, by the mask they are made from (`_schedulable`).
        self._schedulable_masks: dict[int, tuple[bytearray, bytearray]] = {}

    # -- levels ---------------------------------------------------------------------------
    def level(self, priority: int) -> int:
        return bisect_right(self.priorities, priority)

    def bind_cut(self, js: JobState) -> int:
        """Number of levels the job takes where it is in place."""
        # Non-preemptible jobs hold their capacity at every level: nothing may displace them.
        return self.n_levels if not js.pc.preemptible else self.cut(js.sched_priority)

    # -- transactions ---------------------------------------------------------------------
    # A transaction journals each job's placement before it changes; rolling back puts every
    # journalled job back into its earlier placement. One small tuple per change, not closures:
    # a 32,000-member gang otherwise leaves ~250,000 garbage-collected objects behind it.
    def begin(self) -> None:
        self._journal = []
        self._trimmed_at_begin = self._trimmed

    def commit(self) -> None:
        self._journal = None

    def rollback(self) -> None:
        journal, self._journal = self._journal or [], None
        for js, node, priority, bound, evicted in reversed(journal):
            self._occupy(js, +1)
            js.node, js.sched_priority, js.bound, js.evicted = node, priority, bound, evicted
            self._occupy(js, -1)
        self._trimmed = self._trimmed_at_begin

    def _record(self, js: JobState) -> None:
        if self._journal is not None:
            self._journal.append((js, js.node, js.sched_priority, js.bound, js.evicted))

    def _occupy(self, js: JobState, sign: int) -> None:
        """Take (-1) or give back (+1) the capacity the job holds in its present placement: all of
        its levels when in place; the evicted level, plus its hold on the rest, when evicted."""
        if not js.bound:
            return
        if js.evicted:
            self._mark(js.node, 0, 1, js.pairs, sign)  # type: ignore[arg-type]
            self._hold(js, -sign)
        else:
            cut = self.bind_cut(js)
            self._mark(js.node, 0, cut, js.pairs, sign)  # type: ignore[arg-type]
            self.tops[js.node * self.n_levels + cut - 1] -= sign  # type: ignore[operator]

    def _mark(self, node: int, start: int, stop: int, pairs: tuple[tuple[int, int], ...], sign: int) -> None:
        self._last_fit = None
        rows = self.alloc[node]
        if not self._copied[node]:  # the base's rows: this cycle's own copy from now on
            self._copied[node] = 1
            self._touched.append(node)
            rows = self.alloc[node] = [list(row) for row in rows]
        for lvl in range(start, stop):
            row = rows[lvl]
            for i, amount in pairs:
                row[i] += sign * amount
        for lvl, index in self._indices.items():
            if start <= lvl < stop:
                index.update(node)

    def _hold(self, js: JobState, sign: int) -> None:
        if self.held is None:
            return
        rows = self.held[js.node]  # type: ignore[index]
        for lvl in range(1, self.bind_cut(js)):
            for i, amount in js.pairs:
                rows[lvl][i] += sign * amount

    # -- binding --------------------------------------------------------------------------
    def bind(self, js: JobState, placement: Placement) -> None:
        self._record(js)
        if js.bound and js.evicted:
            self._hold(js, -1)
            js.sched_priority, js.evicted = placement.priority, False
            cut = self.bind_cut(js)
            self._mark(placement.node, 1, cut, js.pairs, -1)
        else:
            js.node, js.sched_priority, js.evicted, js.bound = placement.node, placement.priority, False, True
            cut = self.bind_cut(js)
            last = self._last_fit
            self._mark(placement.node, 0, cut, js.pairs, -1)
            if last is not None and last[2] == placement.node and last[0] == js.pairs:
                self._last_fit = last  # only capacity of that node taken, by a job of those pairs: still the first fit
        self.tops[placement.node * self.n_levels + cut - 1] += 1

    def bind_counted(self, counts: Counts) -> None:
        """Bind jobs already placed, as `bind` each would, before anything else changed this cycle: the
        running jobs at a cycle's start, often thousands, given as counts per (node, cut, request pairs)
        (most of a node's jobs share a few of each; a pool's counts are kept from cycle to cycle,
        `RunningStates`). Into the base (`NodeBase.bind`), which the next cycle starts from: with a
        carried base (not `fresh`), only what the counts changed by since it was carried, negative
        counts giving back what jobs no longer running took. The jobs' states are bound already."""
        assert self._journal is None and not self._touched and not self._indices
        base = self.base
        base.bind(counts)
        self.tops = list(base.tops)
        # Every node over its capacity at the evicted level is over it at some priority level too (all jobs
        # in place count at the lowest level), so the base's over-allocated nodes are the ones to look at.
        self.over_allocated = frozenset(node for node in base.over if any(v < 0 for v in base.alloc[node][EVICTED_LEVEL]))

    def evict(self, js: JobState) -> None:
        self._record(js)
        cut = self.bind_cut(js)
        self._mark(js.node, 1, cut, js.pairs, +1)  # type: ignore[arg-type]
        self.tops[js.node * self.n_levels + cut - 1] -= 1  # type: ignore[operator]
        js.evicted = True
        self._hold(js, +1)

    def unbind_evicted(self, js: JobState) -> None:
        """Release an evicted job's last hold on its node: it is preempted unless put back."""
        self._record(js)
        self._hold(js, -1)
        self._mark(js.node, 0, 1, js.pairs, +1)  # type: ignore[arg-type]
        js.bound = False

    # -- matching -------------------------------------------------------------------------
    def mask(self, js: JobState, tolerations: tuple[Toleration, ...], selector: Mapping[str, str]) -> bytearray:
        """Nodes the job may use."""
        if not tolerations and not selector:  # most placements: asked once per job
            mask = self._home_masks.get(js.static_key)
            if mask is None:
                mask = self._last_home_masks.get(js.static_key)
                if mask is None:
                    mask = bytearray(static_mismatch(node, js.job, (), {}) is None for node in self.nodes)
                self._home_masks[js.static_key] = mask
            return mask
        key = (js.static_key, tolerations, tuple(sorted(selector.items())))
        mask = self._masks.get(key)
        if mask is None:
            mask = self._last_masks.get(key)
            if mask is None:
                mask = bytearray(static_mismatch(node, js.job, tolerations, selector) is None for node in self.nodes)
            self._masks[key] = mask
        return mask

    def _schedulable(self, mask: bytearray) -> bytearray:
        """``mask`` without the over-allocated nodes; the same object for the same mask all cycle (`_last_fit`)."""
        made = self._schedulable_masks.get(id(mask))
        if made is None or made[0] is not mask:
            derived = bytearray(mask)
            for node in self.over_allocated:
                derived[node] = 0
            made = self._schedulable_masks[id(mask)] = (mask, derived)
        return made[1]

    def _index(self, lvl: int) -> _LevelIndex:
        index = self._indices.get(lvl)
        if index is None:  # the base's, with the nodes this cycle changed so far
            index = self._indices[lvl] = self.base.index(lvl).copy(_key_maker(self.alloc, lvl, self.indexed))
            for node in self._touched:
                index.update(node)
        return index

    def _lowest_key(self, js: JobState) -> int:
        """The least first index key a node may have to be found for the job: Armada looks nodes up from
        the request in an index of free capacity rounded DOWN to the resolution, so a node is passed over
        unless its rounded capacity reaches the request, i.e. key >= ceil(request / resolution), even where
        the exact capacity would fit (TestGangScheduler: a size not a multiple of the resolution blocks)."""
        r, resolution = self.indexed[0]
        return -(-js.req[r] // resolution)

    def search(self, lvl: int, js: JobState, mask: bytearray) -> int | None:
        """Tightest node that fits: smallest allocatable first, lexicographically over indexed resources."""
        keys = self._index(lvl).keys
        alloc, pairs = self.alloc, js.pairs
        if self.indexed:
            r, resolution = self.indexed[0]
            start = bisect_left(keys, (-(-js.req[r] // resolution),))  # `_lowest_key`, written out: every search
        else:
            start = 0
        for i in range(start, len(keys)):
            node = keys[i][-1]
            if mask[node]:
                row = alloc[node][lvl]
                for r, amount in pairs:
                    if row[r] < amount:
                        break
                else:
                    return node
        return None

    def _floor(self, js: JobState) -> tuple[int, int] | None:
        """(resource, amount) a node must have free to be found for the job (`_lowest_key`), where that is
        more than the job's request of it (a request not a multiple of the index resolution)."""
        if not self.indexed:
            return None
        r, resolution = self.indexed[0]
        floor = self._lowest_key(js) * resolution
        return (r, floor) if floor > js.req[r] else None

    def fits(self, node: int, lvl: int, js: JobState) -> bool:
        row = self.alloc[node][lvl]
        for r, amount in js.pairs:
            if row[r] < amount:
                return False
        return True

    def _search_held(self, lvl: int, js: JobState, mask: bytearray) -> int | None:
        """Like `search`, but counting evicted jobs as still in place (fair-share preemption off)."""
        assert self.held is not None
        best: tuple[tuple[int, ...], int] | None = None
        lowest = (self._lowest_key(js),) if self.indexed else ()
        for node in range(len(self.nodes)):
            if not mask[node]:
                continue
            row, held = self.alloc[node][lvl], self.held[node][lvl]
            if all(row[r] - held[r] >= amount for r, amount in js.pairs):
                key = (*((row[i] - held[i]) // res for i, res in self.indexed), node)
                if key >= lowest and (best is None or key < best[0]):
                    best = (key, node)
        return None if best is None else best[1]

    # -- node selection -------------------------------------------------------------------
    def select(self, js: JobState, selector: Mapping[str, str]) -> Placement | None:
        """Where the job goes: back onto its own node if evicted, else home first then away."""
        if js.evicted:
            lvl = self.level(js.sched_priority) if js.pc.preemptible else self.n_levels - 1
            if not self.displacement_follows:
                lvl = self._lowest_top(js.node, lvl)  # type: ignore[arg-type]
            if js.node in self.over_allocated or self.fits(js.node, lvl, js):  # type: ignore[arg-type]
                return Placement(js.node, js.sched_priority, NO_PREEMPTION)  # type: ignore[arg-type]
            return None
        placement = self._select_at(js, js.pc.priority, (), selector)
        if placement is not None:
            return placement
        for away in js.pc.away_node_types:
            node_type = self.config.well_known_node_types.get(away.well_known_node_type)
            if node_type is None:
                continue
            tolerations = tuple(Toleration(t.key, "Equal", t.value, t.effect) for t in node_type.taints)
            placement = self._select_at(js, away.priority, tolerations, selector)
            if placement is not None:
                return placement
        return None

    def _lowest_top(self, node: int, lvl: int) -> int:
        """The lowest of `lvl` and the top levels of the jobs in place on the node. A job taking
        levels up to `lvl` leaves each of those jobs its place only if it fits at that job's top
        level too; allocatable grows with the level, so the lowest one decides. (Capacity held
        by other pods below `lvl` still counts as free: Kubernetes preempts them.)"""
        tops, base = self.tops, node * self.n_levels
        for low in range(1, lvl):
            if tops[base + low]:
                return low
        return lvl

    def _select_at(self, js: JobState, priority: int, tolerations: tuple[Toleration, ...], selector: Mapping[str, str]) -> Placement | None:
        mask = self.mask(js, tolerations, selector)
        if self.over_allocated:
            mask = self._schedulable(mask)
        last = self._last_fit
        if (
            last is not None
            and last[1] is mask
            and last[0] == js.pairs
            and self.fits(last[2], EVICTED_LEVEL, js)
            and (last[3] is None or self.alloc[last[2]][EVICTED_LEVEL][last[3][0]] >= last[3][1])
        ):
            return Placement(last[2], priority, NO_PREEMPTION)
        node = self.search(EVICTED_LEVEL, js, mask)
        self._last_fit = None if node is None else (js.pairs, mask, node, self._floor(js))
        if node is not None:
            return Placement(node, priority, NO_PREEMPTION)
        top = self.level(priority)
        if self.search(top, js, mask) is None:
            return None
        if self.fair_preemption_enabled:
            placement = self._fair_preemption(js, priority, mask)
            if placement is not None:
                return placement
        held = self.held is not None and not self.fair_preemption_enabled
        for lvl in range(1, top + 1):
            node = self._search_held(lvl, js, mask) if held else self.search(lvl, js, mask)
            if node is not None:
                return Placement(node, priority, self.priorities[lvl - 1])
        return None

    def _fair_preemption(self, js: JobState, priority: int, mask: bytearray) -> Placement | None:
        """Take the places of evicted jobs that would be put back last, node by node."""
        if self.evicted_order is None:
            return None
        if self._order is None:
            self._order = self.evicted_order()
        order = self._order
        end = len(order) - self._trimmed
        while end and not (order[end - 1].evicted and order[end - 1].bound):
            end -= 1
        self._trimmed = len(order) - end
        considered: dict[int, tuple[list[int], list[JobState]]] = {}
        for i in range(end - 1, -1, -1):
            victim = order[i]
            if not (victim.evicted and victim.bound) or victim.sched_priority > priority:
                continue
            node = victim.node
            assert node is not None
            if not mask[node]:
                continue
            entry = considered.get(node)
            if entry is None:
                entry = (list(self.alloc[node][EVICTED_LEVEL]), [])
                considered[node] = entry
            available, victims = entry
            for r, amount in victim.pairs:
                available[r] += amount
            victims.append(victim)
            if all(available[r] >= amount for r, amount in js.pairs):
                for v in victims:
                    self.unbind_evicted(v)
                return Placement(node, priority, max(v.sched_priority for v in victims), len(victims))
        return None

    def reset_evicted_order(self, provider: Callable[[], list[JobState]] | None) -> None:
        self.evicted_order = provider
        self._order = None
        self._trimmed = 0

    def oversubscribed_levels(self) -> dict[int, set[int]]:
        """Nodes where some priority level is over-allocated, with those levels' priorities."""
        result: dict[int, set[int]] = {}
        for node in sorted(self.base.over.union(self._touched)):  # the other nodes' rows are the base's
            rows = self.alloc[node]
            for lvl in range(1, self.n_levels):
                if any(v < 0 for v in rows[lvl]):
                    result.setdefault(node, set()).add(self.priorities[lvl - 1])
        return result

    def gang_label_values(self, label: str) -> list[str]:
        """The values of a gang's uniformity ``label`` among the pool's nodes: its members go on nodes
        that share one. (Without a label a gang may use every node of the pool, across clusters, as
        in Armada; the label is how a gang is kept in one cluster, rack or zone.)"""
        values = self._label_values.get(label)
        if values is None:
            values = self._label_values[label] = sorted({value for node in self.nodes if (value := node.labels.get(label))})
        return values
