"""explain and the scheduler reports answered from a `LogSource`: what the command line, the REST
routes and the gRPC SchedulerReporting service all call, so they answer alike.

Reading is one pass over `events` (`streams.replay.history`); a job's cycles the records do not
tell are recomputed by repeating the scheduler feed's cycles up to the job's end, when the log
holds the feed. ``progress`` gives each phase of a long read a counter to tell how far it has got
(the command line prints one line a phase, `streams.client.progress.on_stderr`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from streams.replay.cycles import Configurations
from streams.replay.explain import choose_cycle, job_report, queue_report, replayed_outcomes, scheduling_report
from streams.replay.history import History, read_history
from streams.replay.source import LogSource, LogUnavailable, event_sequences, feed_records
from streams.scheduler.config_file import SchedulerConfiguration

Counter = Callable[[int, int | None], None]  # (done, total or None when not known beforehand)
Phases = Callable[[str, str], Counter]  # (what the phase does, what it counts) -> its counter


def _quiet(what: str, unit: str) -> Counter:
    return lambda done, total: None


def history_of(source: LogSource, jobs: Sequence[str] = (), progress: Phases = _quiet) -> History:
    read = progress("read", "event sequences")

    def sequences() -> Iterator[dict[str, Any]]:
        for count, (_, sequence) in enumerate(event_sequences(source), start=1):
            if count % 10_000 == 0:
                read(count, None)
            yield sequence

    return read_history(sequences(), jobs)


def explain_job(
    source: LogSource,
    job_id: str,
    *,
    replay: bool = True,
    configurations: Sequence[SchedulerConfiguration] = (),
    progress: Phases = _quiet,
) -> dict[str, Any]:
    """The job's story (`streams.replay.explain.job_report`), its unrecorded cycles recomputed when
    ``replay`` and the log holds the scheduler feed (else the report says why not)."""
    history = history_of(source, [job_id], progress)
    report = job_report(history, job_id)
    if not replay:
        report["replay"] = "not asked for"
        return report
    end = None if report["state"] == "queued" else report["events"][-1]["time"]
    try:
        generations = source.feed_generations()
    except LogUnavailable as exc:
        report["replay"] = f"not possible: {exc}"
        return report
    if not generations:
        report["replay"] = f"not possible: {source.description} holds no scheduler feed"
        return report
    total = sum(g.end for g in generations)
    replaying = progress("replayed", "records of the scheduler feed")

    def step(cycles: int, read: int) -> None:
        if cycles % 500 == 0:
            replaying(read, total)

    replayed = replayed_outcomes(
        ((g.name, feed_records(g)) for g in generations),
        Configurations(given=list(configurations)),
        job_id,
        since_ms=report["submitted"],
        until_ms=end,
        progress=step,
    )
    report = job_report(history, job_id, replayed)
    report["replay"] = f"{len(replayed):,} cycles recomputed from the scheduler feed"
    return report


def scheduling(source: LogSource, cycle_id: str | None = None, at_ms: int | None = None, progress: Phases = _quiet) -> dict[str, Any]:
    return scheduling_report(choose_cycle(history_of(source, (), progress), cycle_id, at_ms))


def queue(source: LogSource, name: str, cycle_id: str | None = None, at_ms: int | None = None, progress: Phases = _quiet) -> dict[str, Any]:
    history = history_of(source, (), progress)
    return queue_report(history, choose_cycle(history, cycle_id, at_ms), name)
