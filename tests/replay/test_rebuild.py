"""The recovery drill and the time-travel reads over a log recorded in memory (tests/kit/recorded.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from schemas.codec import Partial, decode, encode
from streams.replay.jobs import job_at, queue_summaries
from streams.replay.rebuild import LiveTables, rebuild
from streams.scheduler.index import SchedulerIndex
from tests.kit.recorded import Recorder


def recorded(steps: int = 12) -> Recorder:
    recorder = Recorder()
    recorder.submit("a", "s1", count=40)
    recorder.submit("a", "gang", count=3, gang=3)
    for i in range(steps):
        if i == 3:
            recorder.submit("b", "s2", count=12, cpu="2")
        if i == steps - 2:
            recorder.submit("b", "s3", count=30, cpu="2")  # some still running, some queued at the end
        recorder.step()
    recorder.fold()
    recorder.schedule()  # the index confirms what the last fold sent: a quiet system
    return recorder


def live(recorder: Recorder, job_states: dict[str, bytes] | None = None, index: SchedulerIndex | None = None) -> LiveTables:
    states = recorder.jobs.table if job_states is None else job_states
    index = recorder.index if index is None else index
    return LiveTables(
        "the recorder",
        [(job_id.encode(), raw) for job_id, raw in states.items()],
        [(key.encode(), value) for key in index.keys() if (value := index.dump(key)) is not None],
    )


def test_a_rebuild_from_events_alone_matches_the_live_tables(tmp_path: Path) -> None:
    recorder = recorded()
    report = rebuild(recorder.log, tmp_path / "rebuilt", live(recorder))
    assert report.ok, (report.jobs_differing[:3], report.index_differing[:3])
    assert report.jobs == report.live_jobs == report.same == len(recorder.jobs.table) == 85
    states = Counter(decode("job_state", raw)["state"] for raw in recorder.jobs.table.values())
    assert report.by_state == dict(sorted(states.items())) and states["succeeded"] > 0 and states["running"] > 0 and states["queued"] > 0
    assert report.index_jobs == report.live_index_jobs == len(recorder.index.jobs) > 0
    assert report.outcomes.get("refused", 0) == 0 and report.events > 100
    assert (tmp_path / "rebuilt" / "jobs").is_dir() and (tmp_path / "rebuilt" / "scheduler-index").is_dir()


def test_every_job_whose_live_state_differs_is_listed_with_its_fields(tmp_path: Path) -> None:
    recorder = recorded()
    states = dict(recorder.jobs.table)
    succeeded = [job_id for job_id, raw in sorted(states.items()) if decode("job_state", raw)["state"] == "succeeded"]
    wrong = decode("job_state", states[succeeded[0]])
    wrong["state"] = "running"
    states[succeeded[0]] = encode("job_state", wrong)
    missing = succeeded[1]
    del states[missing]
    states["01STRAY"] = states[succeeded[2]]
    report = rebuild(recorder.log, tmp_path / "rebuilt", live(recorder, states))
    assert not report.ok
    by_job = {d.job_id: d for d in report.jobs_differing}
    assert set(by_job) == {succeeded[0], missing, "01STRAY"}
    assert (by_job[succeeded[0]].rebuilt, by_job[succeeded[0]].live) == ("succeeded", "running")
    assert "state: live 'running', rebuilt 'succeeded'" in by_job[succeeded[0]].differences
    assert by_job[missing].live is None and by_job["01STRAY"].rebuilt is None
    assert report.jobs == 85 and report.live_jobs == 85 and report.same == 83


def test_an_index_that_lost_a_job_is_caught(tmp_path: Path) -> None:
    recorder = recorded()
    index = SchedulerIndex()
    index.load((key, value) for key in recorder.index.keys() if (value := recorder.index.dump(key)) is not None)
    lost = sorted(index.jobs)[0]
    del index.jobs[lost]
    report = rebuild(recorder.log, tmp_path / "rebuilt", live(recorder, index=index))
    assert [(d.job_id, d.live) for d in report.index_differing] == [(lost, None)]


def test_without_live_tables_the_rebuild_only_counts(tmp_path: Path) -> None:
    report = rebuild(recorded(4).log, tmp_path / "rebuilt")
    assert report.ok and report.live is None and report.jobs == 85


def test_a_job_at_a_time_is_the_log_folded_up_to_then() -> None:
    recorder = Recorder()
    [job_id] = recorder.submit("a", "s", count=1)
    submitted_at = recorder.now
    seen = {}
    for _ in range(6):
        recorder.step()
        recorder.fold()
        seen[recorder.now] = decode("job_state", recorder.jobs.table[job_id])["state"]
    assert job_at(recorder.log, job_id, submitted_at - 1) is None
    submitted = job_at(recorder.log, job_id, submitted_at)
    assert submitted is not None and submitted["state"] == "queued"
    for at, state in seen.items():
        job = job_at(recorder.log, job_id, at)
        assert job is not None and job["state"] == state
        # its spec whole, as a reader sees it, whatever part of it the fold read (`JobStore.latest`)
        assert not isinstance(job["spec"], Partial) and job["spec"] == submitted["spec"] and "namespace" in job["spec"]
    assert set(seen.values()) >= {"running", "succeeded"}


def test_queues_at_a_time_count_jobs_and_usage() -> None:
    recorder = recorded(4)
    from streams.replay.jobs import Refold, refold

    folded = refold(recorder.log, Refold()).folded_jobs()
    summaries = {s["name"]: s for s in queue_summaries({"a": {"priority_factor": 1.0, "cordoned": False}}, folded)}
    jobs = [recorder.jobs.get(job_id) for job_id in recorder.jobs.table]
    for queue in ("a", "b"):
        mine = [job for job in jobs if job["queue"] == queue]
        assert summaries[queue]["queued"] == sum(job["state"] == "queued" for job in mine)
        running = [job for job in mine if job["state"] in ("leased", "pending", "running")]
        assert summaries[queue]["running"] == len(running)
        assert summaries[queue]["usage"].get("cpu", 0) == sum(
            int(job["spec"]["pod_spec"]["containers"][0]["resources"]["requests"]["cpu"]) for job in running
        )
    assert summaries["a"]["defined"] and not summaries["b"]["defined"]
