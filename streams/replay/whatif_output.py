"""A what-if report as a terminal table, CSV rows, and an SVG plot of each queue's share over time.

The SVG is written by hand (no plotting library): two panels, what happened above and the what-if
below, one line per queue in the same colour in both, time on the x axis and the queue's dominant
resource share of the capacity (0 to 1) on the y axis.
"""

from __future__ import annotations

import csv
import io
from html import escape
from typing import Any

from streams.replay.times import show_time as when

METRICS = (
    ("wait_p50_s", "wait p50 (s)"),
    ("wait_p95_s", "wait p95 (s)"),
    ("wait_p99_s", "wait p99 (s)"),
    ("preemptions", "preemptions"),
    ("mean_share", "mean share"),
    ("started", "started"),
    ("not_started", "not started"),
)
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _change(actual: Any, what_if: Any) -> str:
    if not isinstance(actual, int | float) or not isinstance(what_if, int | float):
        return "-"
    delta = what_if - actual
    return "0" if delta == 0 else f"{delta:+.3f}" if isinstance(delta, float) else f"{delta:+d}"


def table(report: dict[str, Any]) -> str:
    window = report["window"]
    lines = [
        f"what-if over {when(window['from'])} .. {when(window['to'])}: {report['jobs']} jobs submitted, {report['cycles']} cycles"
        + (
            f" ({report['estimated_runtimes']} run times estimated: their jobs never finished on their own)"
            if report["estimated_runtimes"]
            else ""
        ),
        f"  recorded with configuration {', '.join(report.get('recorded_configs') or ['-'])};"
        f" what-if with {report.get('what_if_config', '-')}" + (f", weights {report['weights']}" if report.get("weights") else ""),
        "",
        f"  {'queue':<16} {'metric':<14} {'actual':>10} {'what-if':>10} {'change':>10}",
    ]
    for queue, sides in report["queues"].items():
        for key, label in METRICS:
            actual, what_if = sides["actual"][key], sides["what_if"][key]
            lines.append(f"  {queue:<16} {label:<14} {_value(actual):>10} {_value(what_if):>10} {_change(actual, what_if):>10}")
    if report["moved"]:
        lines += ["", "  jobs whose start moved most:"]
        for m in report["moved"]:
            moved = "never started in one of them" if m["moved_s"] is None else f"{m['moved_s']:+.1f} s"
            lines.append(
                f"    {m['job_id']}  {m['queue']:<12} actual {when(m['actual_start'])}  what-if {when(m['what_if_start'])}  {moved}"
            )
    return "\n".join(lines) + "\n"


def csv_text(report: dict[str, Any]) -> str:
    """One row per queue and metric: queue, metric, actual, what_if, change."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["queue", "metric", "actual", "what_if", "change"])
    for queue, sides in report["queues"].items():
        for key, _ in METRICS:
            actual, what_if = sides["actual"][key], sides["what_if"][key]
            change = what_if - actual if isinstance(actual, int | float) and isinstance(what_if, int | float) else ""
            writer.writerow([queue, key, "" if actual is None else actual, "" if what_if is None else what_if, change])
    return out.getvalue()


def svg(report: dict[str, Any], width: int = 900, panel: int = 240) -> str:
    series = report["series"]
    times: list[int] = series["times"]
    queues = sorted(series["actual"])
    left, right, top, gap = 60, 160, 30, 50
    plot_w = width - left - right
    height = top + 2 * panel + gap + 40
    start, end = (times[0], times[-1]) if times else (0, 1)
    span = max(end - start, 1)

    def x(t: int) -> float:
        return left + (t - start) / span * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        ' font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for row, (side, title) in enumerate((("actual", "what happened"), ("what_if", "what-if"))):
        y0 = top + row * (panel + gap)

        def y(share: float, y0: int = y0) -> float:
            return y0 + panel - min(max(share, 0.0), 1.0) * panel

        parts.append(f'<text x="{left}" y="{y0 - 8}" font-weight="bold">{escape(title)}: share of resources per queue</text>')
        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel}" fill="none" stroke="#999"/>')
        for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
            parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
        for i, queue in enumerate(queues):
            points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(times, series[side][queue], strict=True))
            colour = COLOURS[i % len(COLOURS)]
            if points:
                line = f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
                parts.append(f"{line}<title>{escape(queue)}</title></polyline>")
    for i, queue in enumerate(queues):
        colour = COLOURS[i % len(COLOURS)]
        ly = top + 10 + i * 18
        parts.append(f'<rect x="{left + plot_w + 15}" y="{ly - 9}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{left + plot_w + 32}" y="{ly + 1}">{escape(queue)}</text>')
    axis_y = top + 2 * panel + gap + 16
    parts.append(f'<text x="{left}" y="{axis_y}">{escape(when(start))}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{axis_y}" text-anchor="end">{escape(when(end))}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
