"""The executor's heartbeat record: its nodes and every run it holds, ended ones included.

Ended runs stay in reports until the backend forgets them, so the control plane can tell a run
that finished (its end event may still be on its way) from one the executor no longer knows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from executor.backend import NodeInfo, RunStatus


def node_record(node: NodeInfo) -> dict[str, Any]:
    return {
        "name": node.name,
        "allocatable": dict(node.allocatable),
        "labels": dict(node.labels),
        "taints": [{"key": t["key"], "value": t.get("value"), "effect": t["effect"]} for t in node.taints],
        "unschedulable": node.unschedulable,
        "non_flotilla_usage": dict(node.non_flotilla_usage),
    }


def report_record(executor_id: str, pool: str, time_ms: int, nodes: Iterable[NodeInfo], runs: Iterable[RunStatus]) -> dict[str, Any]:
    return {
        "executor": executor_id,
        "pool": pool,
        "time": time_ms,
        "nodes": [node_record(node) for node in nodes],
        "runs": [{"run_id": r.run_id, "job_id": r.job_id, "node": r.node, "state": r.state} for r in runs],
    }
