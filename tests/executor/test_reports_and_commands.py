"""The heartbeat record and the parsing of commands, both against the Avro schemas."""

from __future__ import annotations

import pytest

from executor.backend import Lease, NodeInfo, RunStatus
from executor.commands import DEFAULT_GRACE_S, CommandError, Kill, parse_command
from executor.reports import report_record
from schemas.codec import decode, encode
from tests.executor.builders import job_spec


def test_a_report_lists_nodes_and_every_held_run_and_encodes() -> None:
    node = NodeInfo(
        name="gpu-0",
        allocatable={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
        labels={"kubernetes.io/hostname": "gpu-0"},
        taints=({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},),
    )
    runs = [
        RunStatus("r1", "j1", "q", "s", "gpu-0", "running"),
        RunStatus("r2", "j2", "q", "s", "gpu-0", "succeeded", exit_code=0),
    ]
    record = decode("executor_report", encode("executor_report", report_record("exec-1", "gpus", 123, [node], runs)))
    assert record["executor"] == "exec-1"
    assert record["pool"] == "gpus"
    assert record["time"] == 123
    assert record["nodes"][0]["allocatable"]["nvidia.com/gpu"] == "8"
    assert record["nodes"][0]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert [(r["run_id"], r["node"], r["state"]) for r in record["runs"]] == [("r1", "gpu-0", "running"), ("r2", "gpu-0", "succeeded")]


def command(kind: str, **fields: object) -> dict[str, object]:
    record = {
        "command_id": "c1",
        "executor": "exec-1",
        "kind": kind,
        "job_id": "j1",
        "run_id": "r1",
        "queue": "q",
        "job_set_id": "s",
        "node": None,
        "spec": None,
        "grace_period_seconds": None,
        "reason": None,
        "created": 1,
        **fields,
    }
    return decode("executor_command", encode("executor_command", record))


def test_a_lease_command_becomes_a_lease_with_its_spec() -> None:
    spec = job_spec(args=["echo hi"])
    action = parse_command(command("lease", node="node-1", spec=spec))
    assert isinstance(action, Lease)
    assert (action.run_id, action.job_id, action.queue, action.job_set_id, action.node) == ("r1", "j1", "q", "s", "node-1")
    assert action.spec["pod_spec"]["containers"][0]["args"] == ["echo hi"]


def test_cancel_and_preempt_become_kills_with_their_outcome_and_grace() -> None:
    assert parse_command(command("cancel_run", grace_period_seconds=5)) == Kill("r1", 5.0, "cancelled")
    assert parse_command(command("preempt_run")) == Kill("r1", DEFAULT_GRACE_S, "preempted")


@pytest.mark.parametrize(
    ("kind", "fields", "error"),
    [("lease", {"node": "node-1"}, "has no spec"), ("lease", {"spec": job_spec()}, "has no node"), ("reboot", {}, "unknown command kind")],
)
def test_commands_that_cannot_be_acted_on_say_why(kind: str, fields: dict[str, object], error: str) -> None:
    with pytest.raises(CommandError, match=error):
        parse_command(command(kind, **fields))
