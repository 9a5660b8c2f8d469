"""The executor-report agent in Faust (`agent.test_context()` on the memory store, see
`tests.kit.plane`): a report goes to the scheduler feed in full at most every five seconds per
executor, as a heartbeat in between, timed by the report's place on the log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from schemas.codec import encode
from streams.agents import executor_reports
from streams.plane import ControlPlane
from streams.scheduler import feed
from tests.kit.plane import agent_plane, running, sent
from tests.kit.quantities import CPU, GI

T = 1_717_000_000.0  # epoch seconds
T_MS = int(T * 1000)


def plane(tmp_path: Path) -> ControlPlane:
    built = agent_plane(tmp_path)
    executor_reports.register(built)
    return built


def report(executor: str = "ex1", *, time: int = 0, **node: Any) -> bytes:
    return encode(
        "executor_report",
        {
            "executor": executor,
            "pool": "default",
            "time": time,  # the executor's clock: not what the scheduler goes by
            "nodes": [
                {
                    "name": "node-1",
                    "allocatable": {"cpu": "32", "memory": "128Gi"},
                    "labels": {"zone": "a"},
                    "taints": [{"key": "gpu", "value": None, "effect": "NoSchedule"}],
                    "unschedulable": False,
                    "non_flotilla_usage": {"cpu": "500m"},
                    **node,
                }
            ],
            "runs": [
                {"run_id": "run-1", "job_id": "job-1", "node": "node-1", "state": "running"},
                {"run_id": "run-2", "job_id": "job-2", "node": "node-1", "state": "succeeded"},
            ],
        },
    )


def forwarded(plane: ControlPlane) -> list[feed.ExecutorState | feed.Heartbeat]:
    records = [feed.decode(s.body) for s in sent(plane, plane.topics.scheduler_feed)]
    assert all(isinstance(r, feed.ExecutorState | feed.Heartbeat) for r in records), records
    return [r for r in records if isinstance(r, feed.ExecutorState | feed.Heartbeat)]


def test_a_report_is_forwarded_in_full_in_milli_units_at_its_log_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        reports = plane(tmp_path)
        async with running(reports, "executor-reports") as agent:
            await agent.put(report(time=42), key=b"ex1", timestamp=T)

        [state] = forwarded(reports)
        assert isinstance(state, feed.ExecutorState)
        assert (state.executor, state.pool, state.time) == ("ex1", "default", T_MS)
        [node] = state.nodes
        assert node.resources == {"cpu": 32 * CPU, "memory": 128 * GI}
        assert node.used == {"cpu": 500}
        assert node.labels == {"zone": "a"} and node.taints == ({"key": "gpu", "value": None, "effect": "NoSchedule"},)
        assert state.runs == {"run-1": "job-1", "run-2": "job-2"}
        assert state.active == ("run-1",)  # a succeeded run holds nothing
        assert reports.metrics.registry.get_sample_value("flotilla_executor_reports_total", {"outcome": "forwarded"}) == 1

    asyncio.run(scenario())


def test_reports_within_five_seconds_of_the_last_full_one_become_heartbeats(tmp_path: Path) -> None:
    async def scenario() -> None:
        reports = plane(tmp_path)
        async with running(reports, "executor-reports") as agent:
            await agent.put(report(), key=b"ex1", timestamp=T)
            await agent.put(report(), key=b"ex1", timestamp=T + 1)
            await agent.put(report("ex2"), key=b"ex2", timestamp=T + 2)  # another executor's first report
            await agent.put(report(), key=b"ex1", timestamp=T + 4.999)
            await agent.put(report(), key=b"ex1", timestamp=T + 5)

        records = forwarded(reports)
        assert [type(r).__name__ for r in records] == ["ExecutorState", "Heartbeat", "ExecutorState", "Heartbeat", "ExecutorState"]
        assert records[1] == feed.Heartbeat("ex1", T_MS + 1_000)
        assert records[3] == feed.Heartbeat("ex1", T_MS + 4_999)
        assert [(r.executor, r.time) for r in records] == [
            ("ex1", T_MS),
            ("ex1", T_MS + 1_000),
            ("ex2", T_MS + 2_000),
            ("ex1", T_MS + 4_999),
            ("ex1", T_MS + 5_000),
        ]
        # everything the scheduler is sent goes to its one partition's feed, unkeyed
        assert {(s.key, s.partition) for s in sent(reports, reports.topics.scheduler_feed)} == {(None, 0)}

    asyncio.run(scenario())


def test_a_malformed_report_is_skipped_and_does_not_count_as_sent_in_full(tmp_path: Path) -> None:
    async def scenario() -> None:
        reports = plane(tmp_path)
        async with running(reports, "executor-reports") as agent:
            await agent.put(b"\x02not a report", key=b"ex1", timestamp=T)
            await agent.put(report(allocatable={"cpu": "lots"}), key=b"ex1", timestamp=T + 0.5)  # not a quantity
            await agent.put(report(), key=b"ex1", timestamp=T + 1)

        [state] = forwarded(reports)
        assert isinstance(state, feed.ExecutorState) and state.time == T_MS + 1_000
        assert reports.metrics.registry.get_sample_value("flotilla_executor_reports_total", {"outcome": "malformed"}) == 2

    asyncio.run(scenario())


def test_a_report_without_a_key_always_goes_in_full(tmp_path: Path) -> None:
    async def scenario() -> None:
        reports = plane(tmp_path)
        async with running(reports, "executor-reports") as agent:
            await agent.put(report(), key=None, timestamp=T)
            await agent.put(report(), key=None, timestamp=T + 1)

        assert [type(r).__name__ for r in forwarded(reports)] == ["ExecutorState", "ExecutorState"]

    asyncio.run(scenario())
