"""Why a job waited, where it went and why it was preempted; and the scheduler's reports of any cycle.

`job_report` tells a job's story from the log: its events, and for every cycle in which it was
queued the reason it stayed queued with its queue's share and fair share at that cycle, where it
was placed and why, and why it was preempted (urgency or fair share, and the jobs that took its
node). Cycle records name at most a capped number of jobs left queued; where the cap (or a cycle
that decided nothing, and so left no record) hides the job, the cycle is recomputed by replaying
the scheduler feed (`replayed_outcomes`), when the feed is at hand.

`queue_report` and `scheduling_report` are Armada's `get queue-report` and `get
scheduling-report`, answered for any recorded cycle rather than only the last one.

Everything here returns plain JSON-ready dicts; `streams.scheduler.report_text` renders them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from streams.domain.jobs import apply_event
from streams.domain.resources import job_resource_request
from streams.domain.states import TransitionRefused
from streams.replay.cycles import Configurations, Placed, Repeated, repeat
from streams.replay.history import CycleRecord, History, JobEvent
from streams.scheduler import feed
from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.model import CycleResult

# Shares are compared at this precision when consecutive cycles are grouped into one span.
SHARE_DIGITS = 3
URGENCY, FAIR_SHARE, ON_REQUEST = "urgency", "fair share", "on request"


class NotFound(LookupError):
    """The log holds no such job, queue or cycle: the message says what was looked for and where."""


@dataclass(frozen=True)
class CycleOutcome:
    """What one cycle did with the job: ``kind`` is waiting, leased or preempted."""

    cycle_id: str
    time: int
    tick_offset: int
    kind: str
    reason: str
    source: str  # "recorded" or "replayed"
    pool: str = ""
    shares: dict[str, Any] | None = None
    executor: str | None = None
    node: str | None = None


# -- replay: the cycles the records do not tell ------------------------------------------------
def replayed_outcomes(
    generations: Iterable[tuple[str, Iterable[tuple[Placed, feed.FeedRecord | None]]]],
    configurations: Configurations,
    job_id: str,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, CycleOutcome]:
    """Per cycle id (a faithful replay names cycles as the scheduler did), what each repeated
    cycle did with the job (cycles that did not consider
    it are left out), over the feed's generations (`streams.replay.source.feed_records`). A
    generation's cycles after ``until_ms`` are not run (its records are not read further).
    ``progress`` is told the cycles repeated and the feed records read, over all generations so far."""
    found: dict[str, CycleOutcome] = {}
    cycles = 0
    before = 0  # the records of the generations already replayed
    for name, records in generations:
        last = -1
        for step in repeat(name, records, configurations, capture_pools=True):
            if not isinstance(step, Repeated):
                continue
            cycles += 1
            last = step.offset
            if progress is not None:
                progress(cycles, before + step.offset)
            if until_ms is not None and step.tick.time > until_ms:
                break
            if since_ms is not None and step.tick.time < since_ms:
                continue
            for pool, inputs, result in step.pools:
                seen = _outcome_in(result, job_id)
                if seen is None:
                    continue
                kind, reason, node = seen
                queue = next((j.queue for j in inputs.queued if j.id == job_id), None) or next(
                    (r.job.queue for r in inputs.running if r.job.id == job_id), ""
                )
                share = next((_share_row(s) for s in result.shares if s.queue == queue), None)
                executor, _, node_name = (node or "").partition("/")
                found.setdefault(
                    step.outcome.cycle_id,
                    CycleOutcome(
                        step.outcome.cycle_id,
                        step.tick.time,
                        step.offset,
                        kind,
                        reason,
                        "replayed",
                        pool,
                        share,
                        executor or None,
                        node_name or None,
                    ),
                )
        before += last + 1
    return found


def _outcome_in(result: CycleResult, job_id: str) -> tuple[str, str, str | None] | None:
    for placed in result.scheduled:
        if placed.job_id == job_id:
            return "leased", "", placed.node
    for victim in result.preempted:
        if victim.job_id == job_id:
            return "preempted", victim.reason, victim.node
    for group in result.unscheduled:
        if job_id in group.job_ids:
            return "waiting", group.reason, None
    return None


def _share_row(share: Any) -> dict[str, Any]:
    return {
        "fair_share": share.fair_share,
        "adjusted_fair_share": share.adjusted_fair_share,
        "share_before": share.share_before,
        "share": share.actual_share,
    }


# -- the job's story ---------------------------------------------------------------------------
def job_report(history: History, job_id: str, replayed: dict[str, CycleOutcome] | None = None) -> dict[str, Any]:
    """The job's events and every cycle's account of it. ``replayed``: outcomes recomputed by
    replay, by cycle id, used where the records do not name the job."""
    events = history.events.get(job_id) or []
    if not events or events[0].kind != "JobSubmitted":
        raise NotFound(f"job {job_id} is not in the log (read {history.sequences:,} event sequences)")
    first = events[0]
    spec = first.payload
    job, queued_spans = _fold(job_id, events)
    end = events[-1].time if job["state"] in ("succeeded", "failed", "cancelled", "preempted") else None
    outcomes: list[CycleOutcome] = []
    hidden = 0
    recorded = set()
    for cycle in history.cycles:
        if cycle.time < first.time or (end is not None and cycle.time > end):
            continue
        recorded.add(cycle.cycle_id)
        outcome = _recorded_outcome(cycle, job_id, first.queue)
        queued = any(start <= cycle.time and (stop is None or cycle.time <= stop) for start, stop in queued_spans)
        if outcome is None and queued:
            outcome = (replayed or {}).get(cycle.cycle_id)
            if outcome is None:
                hidden += 1
                outcome = _unnamed(cycle, first.queue)
        if outcome is not None:
            outcomes.append(outcome)
    # Cycles that decided nothing left no record: the replay tells them.
    for cycle_id, outcome in sorted((replayed or {}).items()):
        if cycle_id not in recorded and outcome.time >= first.time and (end is None or outcome.time <= end):
            outcomes.append(outcome)
    outcomes.sort(key=lambda o: (o.time, o.tick_offset))
    return {
        "job_id": job_id,
        "queue": first.queue,
        "job_set_id": first.job_set_id,
        "owner": first.user,
        "priority_class": spec.get("priority_class"),
        "priority": job["priority"],
        "state": job["state"],
        "submitted": first.time,
        "events": [_event_row(e) for e in events],
        "waiting": _spans([o for o in outcomes if o.kind == "waiting"]),
        "placements": [_placement(history, o) for o in outcomes if o.kind == "leased"],
        "preemptions": _preemptions(history, events, outcomes),
        "cycles_hidden": hidden,
        "replayed": replayed is not None,
    }


def _fold(job_id: str, events: list[JobEvent]) -> tuple[dict[str, Any], list[tuple[int, int | None]]]:
    """The job's last state and the spans (from, to) in which it was queued (to None: still queued)."""
    job: dict[str, Any] | None = None
    spans: list[tuple[int, int | None]] = []
    since: int | None = None
    for e in events:
        raw = {"event_id": f"{e.time}:{e.kind}:{len(spans)}:{id(e)}", "created": e.time, "job_id": job_id, "payload": e.payload}
        envelope = {"queue": e.queue, "job_set_id": e.job_set_id, "user": e.user, "groups": []}
        try:
            after = apply_event(job, e.kind, raw, envelope)
        except TransitionRefused:
            continue
        if after is None:
            continue
        if after["state"] == "queued" and since is None:
            since = e.time
        elif after["state"] != "queued" and since is not None:
            spans.append((since, e.time))
            since = None
        job = after
    if since is not None:
        spans.append((since, None))
    assert job is not None
    return job, spans


def _recorded_outcome(cycle: CycleRecord, job_id: str, queue: str) -> CycleOutcome | None:
    mine = [d for d in cycle.decisions if d["job_id"] == job_id]
    if not mine:
        return None
    decision = next((d for d in mine if d["kind"] != "unschedulable"), mine[0])
    kind = {"leased": "leased", "preempted": "preempted"}.get(decision["kind"], "waiting")
    pool = decision["reason"].removeprefix("scheduled in pool ") if kind == "leased" else None
    found = cycle.queue_share(queue, pool)
    reason = "; ".join(sorted({d["reason"] for d in mine})) if kind == "waiting" else decision["reason"]
    return CycleOutcome(
        cycle.cycle_id,
        cycle.time,
        cycle.tick_offset,
        kind,
        reason,
        "recorded",
        found[0] if found else (pool or ""),
        _shares_of(found[1]) if found else None,
        decision["executor"],
        decision["node"],
    )


def _unnamed(cycle: CycleRecord, queue: str) -> CycleOutcome:
    found = cycle.queue_share(queue)
    why = (
        f"not named in the cycle's record ({cycle.omitted:,} jobs left queued were left out of it); replay the feed to recompute it"
        if cycle.omitted
        else "not considered: its queue was not active in any pool scheduled this cycle"
    )
    return CycleOutcome(
        cycle.cycle_id,
        cycle.time,
        cycle.tick_offset,
        "waiting",
        why,
        "recorded",
        found[0] if found else "",
        _shares_of(found[1]) if found else None,
    )


def _shares_of(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in ("fair_share", "adjusted_fair_share", "share_before", "share")}


def _spans(outcomes: list[CycleOutcome]) -> list[dict[str, Any]]:
    """Consecutive waiting cycles with the same reason, pool and shares, as one span."""
    spans: list[dict[str, Any]] = []
    for o in outcomes:
        shares = {k: round(v, SHARE_DIGITS) for k, v in (o.shares or {}).items()}
        last = spans[-1] if spans else None
        if last is not None and (last["reason"], last["pool"], last["_shares"]) == (o.reason, o.pool, shares):
            last["to"], last["last_cycle"], last["cycles"] = o.time, o.cycle_id, last["cycles"] + 1
            last["sources"].add(o.source)
            continue
        spans.append(
            {
                "from": o.time,
                "to": o.time,
                "cycles": 1,
                "first_cycle": o.cycle_id,
                "last_cycle": o.cycle_id,
                "reason": o.reason,
                "pool": o.pool,
                "shares": o.shares,
                "_shares": shares,
                "sources": {o.source},
            }
        )
    for span in spans:
        del span["_shares"]
        span["sources"] = sorted(span["sources"])
    return spans


def _placement(history: History, o: CycleOutcome) -> dict[str, Any]:
    cycle = history.cycle(o.cycle_id) if o.source == "recorded" else None
    displaced = [d["job_id"] for d in cycle.on_node(o.executor, o.node, "preempted")] if cycle else []
    return {
        "cycle_id": o.cycle_id,
        "time": o.time,
        "executor": o.executor,
        "node": o.node,
        "pool": o.pool,
        "shares": o.shares,
        "displaced": displaced,
        "why": (
            f"the first cycle that reached it with room in pool {o.pool}: queues are served in order of their "
            "dominant resource share over weight (its share was below its fair share or no queue further behind "
            "could use the room), and a job goes to the tightest-fitting node that matches its selector, "
            "tolerations and affinity" + (f"; it displaced {', '.join(displaced)} from that node" if displaced else "")
        ),
    }


def preemption_kind(reason: str) -> str:
    if reason == reasons.URGENCY_PREEMPTED:
        return URGENCY
    if reason == reasons.FAIR_SHARE_PREEMPTED:
        return FAIR_SHARE
    return ON_REQUEST if "request" in reason else reason


def _preemptions(history: History, events: list[JobEvent], outcomes: list[CycleOutcome]) -> list[dict[str, Any]]:
    found = []
    for o in outcomes:
        if o.kind != "preempted":
            continue
        cycle = history.cycle(o.cycle_id) if o.source == "recorded" else None
        by = [d["job_id"] for d in cycle.on_node(o.executor, o.node, "leased")] if cycle else []
        found.append(
            {
                "cycle_id": o.cycle_id,
                "time": o.time,
                "executor": o.executor,
                "node": o.node,
                "kind": preemption_kind(o.reason),
                "reason": o.reason,
                "pool": o.pool,
                "shares": o.shares,
                "by": by,
            }
        )
    if not found:
        for e in events:
            if e.kind == "JobPreempted":
                found.append(
                    {
                        "cycle_id": None,
                        "time": e.time,
                        "executor": None,
                        "node": None,
                        "kind": preemption_kind(e.payload.get("reason") or ""),
                        "reason": e.payload.get("reason") or "",
                        "pool": "",
                        "shares": None,
                        "by": [],
                    }
                )
    return found


_EVENT_DETAILS = (
    "run_id",
    "executor",
    "node",
    "pool",
    "reason",
    "message",
    "exit_code",
    "new_priority",
    "scheduled_at_priority",
    "cycle_id",
)


def _event_row(e: JobEvent) -> dict[str, Any]:
    p = e.payload
    details: dict[str, Any] = {}
    if e.kind == "JobSubmitted":
        requests = job_resource_request(p.get("pod_spec") or {})  # milli-units, as the cycle records' allocations
        details = {"user": e.user, "priority": p.get("priority"), "priority_class": p.get("priority_class"), "requests": requests}
    else:
        for name in _EVENT_DETAILS:
            if p.get(name) is not None:
                details[name] = p[name]
        if e.job_set_wide:
            details["job_set_wide"] = True
    return {"time": e.time, "kind": e.kind, **details}


# -- Armada's reports, for any recorded cycle ----------------------------------------------------
def choose_cycle(history: History, cycle_id: str | None = None, at_ms: int | None = None) -> CycleRecord:
    if cycle_id:
        cycle = history.cycle(cycle_id)
        if cycle is None:
            raise NotFound(f"no cycle {cycle_id} in the log ({len(history.cycles):,} cycles recorded)")
        return cycle
    if at_ms is not None:
        cycle = history.at(at_ms)
        if cycle is None:
            raise NotFound(f"no cycle recorded at or before {at_ms} ms ({len(history.cycles):,} cycles recorded)")
        return cycle
    cycle = history.last()
    if cycle is None:
        raise NotFound(f"the log holds no scheduling cycle (read {history.sequences:,} event sequences)")
    return cycle


def scheduling_report(cycle: CycleRecord) -> dict[str, Any]:
    """Per pool the cycle scheduled: capacity, jobs considered, scheduled, preempted and left
    queued (by reason), and each active queue's shares."""
    kinds = Counter(d["kind"] for d in cycle.decisions)
    return {
        "cycle_id": cycle.cycle_id,
        "time": cycle.time,
        "tick_offset": cycle.tick_offset,
        "config_hash": cycle.config_hash,
        "scheduled": kinds["leased"],
        "preempted": kinds["preempted"],
        "unschedulable_recorded": kinds["unschedulable"],
        "unschedulable_omitted": cycle.omitted,
        "reasons": dict(Counter(d["reason"] for d in cycle.decisions if d["kind"] == "unschedulable").most_common()),
        "preemption_reasons": dict(Counter(d["reason"] for d in cycle.decisions if d["kind"] == "preempted").most_common()),
        "termination": _termination(cycle),
        "pools": cycle.pools,
    }


def _termination(cycle: CycleRecord) -> str:
    prefix = "not considered this cycle: "
    found = sorted({d["reason"].removeprefix(prefix) for d in cycle.decisions if d["reason"].startswith(prefix)})
    return "; ".join(found) if found else "every queued job considered"


def queue_report(history: History, cycle: CycleRecord, queue: str) -> dict[str, Any]:
    """The queue in one cycle: per pool its weight and shares, and what happened to its jobs."""
    rows = [(summary["pool"], row) for summary in cycle.pools for row in summary["queues"] if row["queue"] == queue]
    if not rows and not any(c.queue_share(queue) for c in history.cycles):
        raise NotFound(f"queue {queue} was not active in any of the {len(history.cycles):,} recorded cycles")
    return {
        "queue": queue,
        "cycle_id": cycle.cycle_id,
        "time": cycle.time,
        "active": bool(rows),
        "pools": [{"pool": pool, **row} for pool, row in rows],
        "last_active_cycle": _last_active(history, cycle, queue),
    }


def _last_active(history: History, cycle: CycleRecord, queue: str) -> str | None:
    for earlier in reversed(history.cycles):
        if earlier.time <= cycle.time and earlier.queue_share(queue):
            return earlier.cycle_id
    return None
