"""The explain and report answers as text a person reads: the terminal's and the gRPC reports' `report` string."""

from __future__ import annotations

from typing import Any

from streams.replay.times import show_time as when


def resources_text(milli: dict[str, int]) -> str:
    """Milli-units as a person writes them: cpu=4, memory=256Gi."""
    parts = []
    for name, amount in milli.items():
        value = amount / 1000
        parts.append(f"{name}={value / 2**30:.4g}Gi" if name in ("memory", "ephemeral-storage") else f"{name}={value:g}")
    return ", ".join(parts)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def shares_text(queue: str, shares: dict[str, Any] | None) -> str:
    if not shares:
        return f"queue {queue}: shares not recorded"
    return (
        f"queue {queue} held {_share(shares.get('share_before'))} of the pool at the cycle's start and {_share(shares.get('share'))} after;"
        f" fair share {_share(shares.get('fair_share'))}, demand-capped {_share(shares.get('adjusted_fair_share'))}"
    )


def _event_text(event: dict[str, Any]) -> str:
    shown = {k: resources_text(v) if k == "requests" else v for k, v in event.items() if k not in ("time", "kind")}
    details = ", ".join(f"{k}={v}" for k, v in shown.items())
    return f"  {when(event['time'])}  {event['kind']}" + (f"  ({details})" if details else "")


def job_report_text(report: dict[str, Any]) -> str:
    queue = report["queue"]
    lines = [
        f"job {report['job_id']}: {report['state']}",
        f"  queue {queue}, job set {report['job_set_id']}, owner {report['owner']}, class {report['priority_class']},"
        f" priority {report['priority']}",
        "",
        "events:",
        *(_event_text(e) for e in report["events"]),
    ]
    lines += ["", "while queued:" if report["waiting"] else "while queued: no cycle left it waiting"]
    for span in report["waiting"]:
        cycles = f"{span['cycles']} cycle{'s' if span['cycles'] != 1 else ''}"
        lines.append(f"  {when(span['from'])} .. {when(span['to'])}  {cycles} ({', '.join(span['sources'])}), pool {span['pool'] or '-'}")
        lines.append(f"    why: {span['reason']}")
        lines.append(f"    {shares_text(queue, span['shares'])}")
    if report["cycles_hidden"]:
        lines.append(
            f"  {report['cycles_hidden']} cycle(s) left it out of their record (the per-cycle cap on recorded jobs);"
            " the scheduler feed is needed to recompute them"
        )
    for placed in report["placements"]:
        lines += [
            "",
            f"placed in cycle {placed['cycle_id']} at {when(placed['time'])}: node {placed['node']} of executor {placed['executor']},"
            f" pool {placed['pool']}",
            f"  why: {placed['why']}",
            f"  {shares_text(queue, placed['shares'])}",
        ]
    for p in report["preemptions"]:
        where = f"node {p['node']} of executor {p['executor']}" if p["node"] else "its node"
        lines += [
            "",
            f"preempted ({p['kind']}) at {when(p['time'])}" + (f" in cycle {p['cycle_id']}" if p["cycle_id"] else "") + f" on {where}",
        ]
        lines.append(f"  why: {p['reason']}")
        if p["shares"]:
            lines.append(f"  {shares_text(queue, p['shares'])}")
        if p["by"]:
            lines.append(f"  by: {', '.join(p['by'])} (leased on the same node in that cycle)")
    return "\n".join(lines) + "\n"


_COLUMNS = (
    *(("queue", "<20"), ("weight", ">7"), ("fair", ">6"), ("capped", ">6"), ("before", ">6"), ("after", ">6")),
    *(("queued", ">7"), ("running", ">7"), ("sched", ">6"), ("preempt", ">7")),
)


def _queue_rows(rows: list[dict[str, Any]]) -> list[str]:
    header = "    " + " ".join(f"{name:{spec}}" for name, spec in _COLUMNS)
    lines = [header]
    for r in rows:
        lines.append(
            f"    {r['queue']:<20} {r['weight']:>7.3g} {r['fair_share']:>6.3f} {r['adjusted_fair_share']:>6.3f} {r['share_before']:>6.3f}"
            f" {r['share']:>6.3f} {r['queued']:>7} {r['running']:>7} {r['scheduled']:>6} {r['preempted']:>7}"
        )
    return lines


def scheduling_report_text(report: dict[str, Any]) -> str:
    lines = [
        f"cycle {report['cycle_id']} at {when(report['time'])} (feed offset {report['tick_offset']},"
        f" configuration {report['config_hash'] or 'not recorded'})",
        f"  scheduled {report['scheduled']}, preempted {report['preempted']}, left queued {report['unschedulable_recorded']} named"
        + (f" and {report['unschedulable_omitted']} not named" if report["unschedulable_omitted"] else ""),
        f"  termination: {report['termination']}",
    ]
    if report["reasons"]:
        lines.append("  why jobs stayed queued:")
        lines += [f"    {count:>6}  {reason}" for reason, count in report["reasons"].items()]
    if report["preemption_reasons"]:
        lines.append("  why jobs were preempted:")
        lines += [f"    {count:>6}  {reason}" for reason, count in report["preemption_reasons"].items()]
    for pool in report["pools"]:
        capacity = resources_text(pool["capacity"])
        lines.append(
            f"  pool {pool['pool']}: {pool['nodes']} nodes ({capacity});"
            f" {pool['queued']} queued jobs considered, {pool['unschedulable']} left queued"
        )
        lines += _queue_rows(pool["queues"])
    if not report["pools"]:
        lines.append("  (per-pool shares not recorded: a record written before they were)")
    return "\n".join(lines) + "\n"


def queue_report_text(report: dict[str, Any]) -> str:
    head = f"queue {report['queue']} in cycle {report['cycle_id']} at {when(report['time'])}"
    if not report["active"]:
        last = report["last_active_cycle"]
        return head + f": not active in any pool (no queued or running job){'; last active in cycle ' + last if last else ''}\n"
    lines = [head + ":"]
    for row in report["pools"]:
        lines.append(
            f"  pool {row['pool']}: weight {row['weight']:g}, fair share {row['fair_share']:.3f},"
            f" demand-capped {row['adjusted_fair_share']:.3f};"
            f" share {row['share_before']:.3f} at the start, {row['share']:.3f} after"
        )
        lines.append(
            f"    jobs: {row['queued']} queued, {row['running']} running;"
            f" this cycle scheduled {row['scheduled']}, preempted {row['preempted']}"
        )
        held = resources_text(row["allocation"]) or "nothing"
        lines.append(f"    holds {held}")
    return "\n".join(lines) + "\n"
