"""The explain, report and what-if commands over a log the pipeline's own parts recorded, read
from an archive directory alone (no broker, no worker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.client.cli import main
from streams.scheduler.algorithm import reasons
from streams.scheduler.feed import NodeState
from tests.kit.quantities import CPU, GI
from tests.kit.recorded import Recorder
from tests.replay.test_sources import archive


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recorder, Path, dict[str, list[str]]]:
    """Queue a fills two 4-cpu nodes and more; a 16-cpu job never fits; queue b arrives and takes half back."""
    recorder = Recorder(nodes=tuple(NodeState(f"n{i}", {"cpu": 4 * CPU, "memory": 64 * GI}) for i in range(2)), run_ms=30_000)
    jobs = {"a": recorder.submit("a", "s1", count=10), "huge": recorder.submit("a", "s1", cpu="16")}
    for _ in range(3):
        recorder.step()
    jobs["b"] = recorder.submit("b", "s2", count=4)
    for _ in range(4):
        recorder.step()
    root = tmp_path_factory.mktemp("archive")
    archive(recorder.log, root)
    return recorder, root, jobs


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_from_the_archive_tells_why_a_job_waits_where_one_ran_and_why_one_was_preempted(recorded, capsys) -> None:
    _, root, jobs = recorded
    huge = jobs["huge"][0]
    code, out, _ = run(capsys, "explain", huge, "--from-archive", str(root), "--json", "-q")
    assert code == 0
    report = json.loads(out)
    assert report["state"] == "queued" and report["waiting"][0]["reason"] == reasons.JOB_DOES_NOT_FIT
    assert report["waiting"][0]["shares"]["fair_share"] == 1.0
    assert sum(span["cycles"] for span in report["waiting"]) == 7  # every cycle, recorded or recomputed from the feed
    assert "recomputed" in report["replay"]

    code, out, _ = run(capsys, "get", "job-report", jobs["b"][0], "--from-archive", str(root), "--json", "-q")
    placed = json.loads(out)["placements"][0]
    assert placed["executor"] == "ex1" and placed["pool"] == "default" and placed["shares"]["fair_share"] == 0.5

    preempted = []
    for job_id in jobs["a"]:
        _, out, _ = run(capsys, "explain", job_id, "--from-archive", str(root), "--json", "-q", "--no-replay")
        preempted += json.loads(out)["preemptions"]
    assert len(preempted) == 4 and {p["kind"] for p in preempted} == {"fair share"}
    assert {b for p in preempted for b in p["by"]} <= set(jobs["b"]) and all(p["by"] for p in preempted)
    assert all(p["shares"]["share_before"] > p["shares"]["fair_share"] for p in preempted)

    code, out, _ = run(capsys, "explain", huge, "--from-archive", str(root), "-q")
    assert f"job {huge}: queued" in out and "why: job does not fit on any node" in out and "fair share 1.000" in out


def test_reports_answer_a_past_cycle_and_the_last(recorded, capsys) -> None:
    recorder, root, _ = recorded
    code, out, _ = run(capsys, "get", "scheduling-report", "--from-archive", str(root), "--json", "-q")
    last = json.loads(out)
    code, out, _ = run(capsys, "get", "scheduling-report", "--from-archive", str(root), "--json", "-q", "--at", str(recorder.now - 6_000))
    earlier = json.loads(out)
    # the last cycle that decided anything is the one that preempted for b; the first leased a's jobs
    assert earlier["time"] < last["time"] and (earlier["scheduled"], earlier["preempted"]) == (8, 0)
    assert last["preempted"] == 4 and last["preemption_reasons"] == {reasons.FAIR_SHARE_PREEMPTED: 4}
    (pool,) = earlier["pools"]
    assert pool["capacity"]["cpu"] == 8 * CPU and [q["queue"] for q in pool["queues"]] == ["a"]
    code, out, _ = run(capsys, "get", "queue-report", "b", "--cycle", last["cycle_id"], "--from-archive", str(root), "-q")
    assert code == 0 and "queue b in cycle" in out and "fair share 0.500" in out and "scheduled 4" in out
    code, _, err = run(capsys, "get", "queue-report", "b", "--cycle", "nope", "--from-archive", str(root), "-q")
    assert code == 1 and "no cycle nope" in err
    code, _, err = run(capsys, "explain", "nope", "--from-archive", str(root), "-q")
    assert code == 1 and "job nope is not in the log" in err
    code, _, err = run(capsys, "explain", "nope", "--from-archive", str(root / "missing"))
    assert code == 1 and "no log archive" in err


def test_what_if_without_fair_share_preemption_reports_no_preemptions_and_later_starts_for_b(recorded, capsys, tmp_path) -> None:
    _, root, jobs = recorded
    config = tmp_path / "other.yaml"
    config.write_text(
        "scheduling:\n  priorityClasses:\n    armada-default: {priority: 1000, preemptible: false}\n"
        "    armada-preemptible: {priority: 1000, preemptible: false}\n"
    )
    plot = tmp_path / "share.svg"
    code, out, err = run(capsys, "what-if", "--config", str(config), "--from-archive", str(root), "--format", "json", "--plot", str(plot))
    assert code == 0, err
    report = json.loads(out)
    a, b = report["queues"]["a"], report["queues"]["b"]
    assert a["actual"]["preemptions"] == 4 and a["what_if"]["preemptions"] == 0
    # without preemption b waits for a's 30 s jobs, which outlast the log: b never starts
    assert (b["actual"]["started"], b["actual"]["wait_p50_s"]) == (4, 1.0)
    assert (b["what_if"]["started"], b["what_if"]["not_started"], b["what_if"]["wait_p50_s"]) == (0, 4, None)
    assert {m["job_id"] for m in report["moved"]} == set(jobs["b"]) and all(m["moved_s"] is None for m in report["moved"])
    assert report["estimated_runtimes"] == 12  # 8 of a and 4 of b ran, none finished on its own within the log
    assert plot.read_text().startswith("<svg") and "what-if" in plot.read_text()
    assert "records of the scheduler feed" in err and "simulated 1 of 7 cycles" in err  # progress, on stderr

    code, out, _ = run(capsys, "what-if", "--config", str(config), "--from-archive", str(root), "--format", "csv", "-q")
    rows = [line.split(",") for line in out.splitlines()]
    assert rows[0] == ["queue", "metric", "actual", "what_if", "change"]
    assert ["a", "preemptions", "4", "0", "-4"] in rows

    code, out, _ = run(capsys, "what-if", "--config", str(config), "--from-archive", str(root), "-q", "--priority-factor", "b=0.5")
    assert code == 0 and "wait p50 (s)" in out and "weights {'b': 2.0}" in out
    code, _, err = run(capsys, "what-if", "--config", str(tmp_path / "none.yaml"), "--from-archive", str(root))
    assert code == 1 and "cannot read the file" in err
