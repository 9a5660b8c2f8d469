"""explain, the scheduler reports and what-if, live: a real broker, one worker that archives its log,
fake executors; answered through the command line (from the broker and from the archive), REST
and Armada's SchedulerReporting over gRPC.

One story serves every test: queue a fills an 8-cpu node, a 16-cpu job of a can never fit, queue
b arrives and takes half the node back (fair-share preemption), then an urgent job of b displaces
preemptible jobs (urgency preemption).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ops.broker import EmbeddedBroker
from streams.api.grpc import reporting_pb
from streams.client.cli import main
from streams.client.rest import ClientError
from streams.scheduler.algorithm import reasons
from tests.integration.pipeline import Executors, fake_item, new_queue, states, submit_jobs, wait_states
from tests.integration.workers import Worker, expiring_after, poll, running_worker

pytestmark = pytest.mark.integration

CLASSES = {
    "armada-default": {"priority": 1000, "preemptible": False},
    "armada-preemptible": {"priority": 1000, "preemptible": True},
    "urgent": {"priority": 2000, "preemptible": False},
}
CONFIG = expiring_after(4, priorityClasses=CLASSES)
CONFIG["submission"] = {"allowedPriorityClassNames": dict.fromkeys(CLASSES, True)}
PREEMPTIBLE = "armada-preemptible"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("explain-archive")


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, archive: Path) -> Iterator[Worker]:
    with running_worker(
        broker, tmp_path_factory, "explain", CONFIG, FLOTILLA_SCHEDULE_PERIOD_S="0.5", FLOTILLA_ARCHIVE_DIR=str(archive)
    ) as w:
        yield w


@pytest.fixture(scope="module")
def story(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    executors = Executors(worker, tmp_path_factory.mktemp("explain-executors"))
    try:
        a, b = new_queue(worker, "xa"), new_queue(worker, "xb")
        executors.fake("explain-c", nodes=1, cpu="8", memory="32Gi")
        fill = submit_jobs(worker, a, "fill", [fake_item(executors.selector, "1", "1Gi", 600, PREEMPTIBLE) for _ in range(8)])
        wait_states(worker, fill, {"running"}, 60, "a's 8 jobs running")
        [huge] = submit_jobs(worker, a, "huge", [fake_item(executors.selector, "16", "1Gi", 600, PREEMPTIBLE)])
        late = submit_jobs(worker, b, "late", [fake_item(executors.selector, "1", "1Gi", 600, PREEMPTIBLE) for _ in range(4)])
        wait_states(worker, late, {"running"}, 60, "b's 4 jobs running")
        [urgent] = submit_jobs(worker, b, "urgent", [fake_item(executors.selector, "2", "1Gi", 600, "urgent")])
        wait_states(worker, [urgent], {"running"}, 60, "the urgent job running")
        jobs = states(worker, fill + late)
        yield {
            "a": a,
            "b": b,
            "huge": huge,
            "late": late,
            "urgent": urgent,
            "fair_share_victims": [j for j in fill if jobs[j]["state"] == "preempted"],
            "victims": [j for j, state in jobs.items() if state["state"] == "preempted"],
        }
    finally:
        executors.stop_all()


def get(worker: Worker, path: str) -> tuple[int, Any]:
    try:
        return 200, worker.client.call("GET", path)
    except ClientError as exc:
        return exc.status or 0, exc.body


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def log_options(worker: Worker) -> list[str]:
    return ["--broker", worker.broker.url]


@pytest.fixture
def prefixed(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line reads the worker's topics (its prefix), as `flotilla` would with its environment."""
    monkeypatch.setenv("FLOTILLA_TOPIC_PREFIX", worker.prefix)


def test_explain_a_job_that_waits_from_the_broker_and_from_the_archive(worker: Worker, story, prefixed, archive: Path, capsys) -> None:
    huge = story["huge"]
    code, out, err = cli(capsys, "explain", huge, *log_options(worker), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["state"] == "queued" and report["queue"] == story["a"]
    assert {span["reason"] for span in report["waiting"]} == {reasons.JOB_DOES_NOT_FIT}
    shares = [span["shares"] for span in report["waiting"]]
    # alone, a's fair share is the whole pool; once b is active it is half, and a held all of it when b came
    assert shares[0]["fair_share"] == 1.0 and any(s["fair_share"] == 0.5 and s["share_before"] == 1.0 for s in shares)
    assert sum(span["cycles"] for span in report["waiting"]) > len([s for s in report["waiting"] if "recorded" in s["sources"]])
    assert "recomputed" in report["replay"]

    # the archive the worker keeps answers the same, with nothing but the directory
    poll(lambda: cli(capsys, "explain", huge, "--from-archive", str(archive), "--json", "-q", "--no-replay")[0] == 0 or None, 20, "archive")
    code, out, _ = cli(capsys, "explain", huge, "--from-archive", str(archive), "--json", "-q", "--no-replay")
    from_archive = json.loads(out)
    recorded = [s for s in report["waiting"] if s["sources"] == ["recorded"]]
    assert [(s["reason"], s["shares"]) for s in from_archive["waiting"]][: len(recorded)] == [(s["reason"], s["shares"]) for s in recorded]


def test_rest_explains_placement_and_fair_share_preemption(worker: Worker, story) -> None:
    assert len(story["fair_share_victims"]) >= 4
    status, body = get(worker, f"/api/v1/jobs/{story['late'][0]}/explain")
    assert status == 200, body
    (placed,) = body["placements"]
    assert placed["executor"] == "explain-c" and placed["node"].startswith("node") and placed["pool"] == "default"
    assert placed["shares"]["fair_share"] == 0.5
    kinds = []
    for victim in story["fair_share_victims"]:
        status, body = get(worker, f"/api/v1/jobs/{victim}/explain?replay=false")
        assert status == 200, body
        kinds += [(p["kind"], tuple(p["by"]), p["shares"]["share_before"], p["shares"]["fair_share"]) for p in body["preemptions"]]
        assert "preempted (" in body["report"]
    fair = [k for k in kinds if k[0] == "fair share"]
    assert len(fair) >= 4 and all(set(by) <= set(story["late"]) and by for _, by, _, _ in fair)
    assert all(before > fair_share for _, _, before, fair_share in fair)
    status, body = get(worker, "/api/v1/jobs/nope/explain")
    assert status == 404


def test_grpc_scheduler_reporting_tells_urgency_preemption_and_any_cycle(worker: Worker, story) -> None:
    with grpc.insecure_channel(worker.grpc_target) as channel:
        calls = reporting_pb.stub(channel)
        urgency = []
        for victim in story["victims"]:
            text = calls["GetJobReport"](reporting_pb.JobReportRequest(job_id=victim)).report
            if "preempted (urgency)" in text:
                urgency.append(text)
        assert urgency and all(f"by: {story['urgent']}" in text for text in urgency)
        assert reasons.URGENCY_PREEMPTED in urgency[0]

        last = calls["GetSchedulingReport"](reporting_pb.SchedulingReportRequest()).report
        assert last.startswith("cycle ")
        status, body = get(worker, "/api/v1/scheduling-report")
        assert status == 200 and body["report"] == last
        first_time = body["time"]
        status, _ = get(worker, "/api/v1/scheduling-report?at=0")
        assert status == 404
        queue = calls["GetQueueReport"](
            reporting_pb.QueueReportRequest(queue_name=story["b"]), metadata=(("flotilla-at", str(first_time)),)
        ).report
        assert f"queue {story['b']} in cycle" in queue and "fair share" in queue
        with pytest.raises(grpc.RpcError) as refused:
            calls["GetQueueReport"](reporting_pb.QueueReportRequest(queue_name=story["b"]), metadata=(("flotilla-cycle", "nope"),))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND and "no cycle nope" in (refused.value.details() or "")


def test_what_if_without_preemption_changes_the_numbers(worker: Worker, story, prefixed, tmp_path: Path, capsys) -> None:
    assert states(worker, story["late"])  # the story ran
    other = tmp_path / "other.yaml"
    other.write_text(
        json.dumps(
            {
                **CONFIG,
                "scheduling": {**CONFIG["scheduling"], "priorityClasses": {n: {**c, "preemptible": False} for n, c in CLASSES.items()}},
            }
        )
    )
    code, out, err = cli(
        capsys, "what-if", "--config", str(other), *log_options(worker), "--format", "json", "--plot", str(tmp_path / "s.svg")
    )
    assert code == 0, err
    report = json.loads(out)
    a, b = report["queues"][story["a"]], report["queues"][story["b"]]
    assert a["actual"]["preemptions"] >= 4 and a["what_if"]["preemptions"] == 0
    assert b["actual"]["started"] >= 4 and b["what_if"]["started"] < b["actual"]["started"]
    assert (tmp_path / "s.svg").read_text().count("<polyline") >= 2
