"""Realistic records for every schema, shaped like an Armada ML training gang."""

from __future__ import annotations

from typing import Any

T0 = 1_717_000_000_000  # epoch ms
QUEUE = "ml-research"
JOB_SET = "llm-finetune-2024-05-29"
JOB_ID = "01HZ3M1Q8K4V6T9XW2B7C5D0EF"
RUN_ID = f"{JOB_ID}-1"  # a run id is its job id and attempt number (streams.domain.ids.run_id_for)


def container(name: str, gpus: int) -> dict[str, Any]:
    resources = {"cpu": "7500m", "memory": "60Gi", "nvidia.com/gpu": str(gpus), "ephemeral-storage": "100Gi"}
    return {
        "name": name,
        "image": "registry.example.com/ml/trainer:2.3.1-cuda12",
        "command": ["torchrun"],
        "args": ["--nproc-per-node", str(gpus), "train.py", "--config", "configs/7b.yaml"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HOME", "value": "/cache/hf"}],
        "working_dir": "/workspace",
        "resources": {"requests": resources, "limits": dict(resources)},
        "ports": [{"container_port": 29500, "protocol": "TCP", "name": "rendezvous"}],
    }


def pod_spec() -> dict[str, Any]:
    return {
        "containers": [container("trainer", 8), {**container("metrics-sidecar", 0), "ports": []}],
        "init_containers": [
            {
                "name": "fetch-weights",
                "image": "registry.example.com/tools/fetch:1.0",
                "command": ["sh", "-c", "fetch s3://models/7b /cache"],
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            }
        ],
        "node_selector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "value": None, "effect": "NoSchedule", "toleration_seconds": None},
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute", "toleration_seconds": 300},
        ],
        "affinity": {
            "node_affinity": {
                "required": [
                    {
                        "match_expressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1a", "eu-west-1b"]},
                            {"key": "gpu-health", "operator": "NotIn", "values": ["degraded"]},
                        ]
                    }
                ]
            }
        },
        "termination_grace_period_seconds": 60,
        "active_deadline_seconds": 86_400,
        "priority_class_name": "armada-preemptible",
        "restart_policy": "Never",
        "service_account_name": "trainer",
    }


GANG_ANNOTATIONS = {
    "armadaproject.io/gangId": "finetune-7b-run-42",
    "armadaproject.io/gangCardinality": "4",
    "armadaproject.io/gangNodeUniformityLabel": "topology.kubernetes.io/zone",
}
SERVICES = [{"type": "Headless", "ports": [29500], "name": "rdzv"}, {"type": "NodePort", "ports": [8080], "name": None}]
INGRESSES = [
    {
        "ports": [8080],
        "annotations": {"nginx.ingress.kubernetes.io/ssl-redirect": "true"},
        "tls_enabled": True,
        "cert_name": "wildcard-ml",
        "use_cluster_ip": False,
    }
]


def job_submitted() -> dict[str, Any]:
    return {
        "priority": 2.5,
        "priority_class": "armada-preemptible",
        "client_id": "finetune-7b-run-42-rank-0",
        "namespace": "ml-research",
        "labels": {"team": "llm", "experiment": "finetune-7b"},
        "annotations": dict(GANG_ANNOTATIONS),
        "pod_spec": pod_spec(),
        "services": SERVICES,
        "ingresses": INGRESSES,
    }


def submit_request() -> dict[str, Any]:
    items = []
    for rank in range(4):
        items.append(
            {
                "client_id": f"finetune-7b-run-42-rank-{rank}",
                "priority": 2.5,
                "namespace": "ml-research",
                "labels": {"team": "llm", "rank": str(rank)},
                "annotations": dict(GANG_ANNOTATIONS),
                "pod_spec": pod_spec(),
                "services": SERVICES if rank == 0 else [],
                "ingresses": INGRESSES if rank == 0 else [],
            }
        )
    items.append({"client_id": None, "pod_spec": None})  # answered by validation, not the codec
    return {
        "request_id": "req-8f14e45f",
        "queue": QUEUE,
        "job_set_id": JOB_SET,
        "user": "alice",
        "groups": ["ml", "gpu-users"],
        "items": items,
    }


def payloads() -> list[tuple[str, dict[str, Any]]]:
    """One payload of every event kind, in lifecycle order, then those of no job (the cycle record last)."""
    return [
        ("flotilla.JobSubmitted", job_submitted()),
        ("flotilla.JobValidated", {"pools": ["gpu-eu", "gpu-us"]}),
        (
            "flotilla.JobLeased",
            {
                "run_id": RUN_ID,
                "executor": "cluster-eu-1",
                "node": "gpu-node-17",
                "pool": "gpu-eu",
                "scheduled_at_priority": 1000,
                "cycle_id": "cycle-000123",
            },
        ),
        ("flotilla.JobRunPending", {"run_id": RUN_ID}),
        ("flotilla.JobRunRunning", {"run_id": RUN_ID, "node": "gpu-node-17"}),
        ("flotilla.JobRunSucceeded", {"run_id": RUN_ID}),
        (
            "flotilla.JobRunFailed",
            {
                "run_id": RUN_ID,
                "reason": "OOMKilled",
                "message": "container trainer exceeded 60Gi",
                "exit_code": 137,
                "category": "container_error",
                "retryable": False,
            },
        ),
        ("flotilla.JobSucceeded", {"run_id": RUN_ID}),
        ("flotilla.JobFailed", {"reason": "OOMKilled", "message": "run failed", "exit_code": 137}),
        ("flotilla.JobCancelRequested", {"reason": "user alice cancelled the job set"}),
        ("flotilla.JobCancelled", {"run_id": None, "reason": "user alice cancelled the job set"}),
        ("flotilla.JobPreemptRequested", {"reason": "manual preemption"}),
        ("flotilla.JobRunPreempted", {"run_id": RUN_ID, "reason": "fair share", "preemptor_job_id": "01HZ3M9Z9Z9Z9Z9Z9Z9Z9Z9Z9Z"}),
        ("flotilla.JobPreempted", {"run_id": RUN_ID, "reason": "fair share"}),
        ("flotilla.JobReprioritised", {"new_priority": 0.5}),
        ("flotilla.JobRequeued", {"run_id": RUN_ID, "reason": "lease returned", "avoid_nodes": ["gpu-node-17"]}),
        ("flotilla.ExecutorSettingsUpserted", {"executor": "cluster-eu-1", "cordoned": True, "cordon_reason": "kernel upgrade"}),
        (
            "flotilla.SchedulingCycle",
            {
                "cycle_id": "cycle-000123",
                "cycle_time": T0 + 5_000,
                "seed": -7_234_119_004_551_230_001,
                "feed_offsets": {"0": 918_273},
                "decisions": [
                    {"job_id": JOB_ID, "kind": "leased", "executor": "cluster-eu-1", "node": "gpu-node-17", "reason": "scheduled"},
                    {
                        "job_id": "01HZ3MAAAAAAAAAAAAAAAAAAAA",
                        "kind": "unschedulable",
                        "executor": None,
                        "node": None,
                        "reason": "gang finetune-7b-run-42 needs 4 nodes with equal topology.kubernetes.io/zone",
                    },
                ],
            },
        ),
    ]


# Event kinds that address no job.
NO_JOB = frozenset({"flotilla.SchedulingCycle", "flotilla.ExecutorSettingsUpserted"})


def event_sequence() -> dict[str, Any]:
    events = []
    for i, payload in enumerate(payloads()):
        job_id = None if payload[0] in NO_JOB else JOB_ID
        events.append({"event_id": f"01HZ3N{i:020d}", "created": T0 + i, "job_id": job_id, "payload": payload})
    return {"queue": QUEUE, "job_set_id": JOB_SET, "user": "alice", "groups": ["ml"], "events": events}


def job_state() -> dict[str, Any]:
    return {
        "job_id": JOB_ID,
        "queue": QUEUE,
        "job_set_id": JOB_SET,
        "client_id": "finetune-7b-run-42-rank-0",
        "state": "running",
        "priority": 2.5,
        "priority_class": "armada-preemptible",
        "submitted": T0,
        "last_transition": T0 + 9_000,
        "cancel_requested": False,
        "preempt_requested": True,
        "runs": [
            {
                "run_id": "01HZ3M0000000000000000000A",
                "executor": "cluster-eu-1",
                "node": "gpu-node-3",
                "state": "lease_returned",
                "exit_code": None,
                "reason": "node drained",
                "leased_at": T0 + 100,
                "started_at": None,
                "finished_at": T0 + 700,
            },
            {
                "run_id": RUN_ID,
                "executor": "cluster-eu-1",
                "node": "gpu-node-17",
                "state": "running",
                "exit_code": None,
                "reason": None,
                "leased_at": T0 + 5_000,
                "started_at": T0 + 9_000,
                "finished_at": None,
            },
        ],
        "reason": "node drained",
        "recent_event_ids": [f"01HZ3N{i:020d}" for i in range(32)],
    }


def queue() -> dict[str, Any]:
    return {
        "name": QUEUE,
        "priority_factor": 2.0,
        "user_owners": ["alice", "bob"],
        "group_owners": ["ml"],
        "cordoned": False,
        "labels": {"cost-centre": "research"},
        "resource_limits_by_priority_class_name": {
            "armada-preemptible": {
                "maximum_resource_fraction": {"cpu": 0.5, "nvidia.com/gpu": 0.25},
                "maximum_resource_fraction_by_pool": {"gpu-eu": {"nvidia.com/gpu": 0.4}},
            }
        },
    }


def executor_command() -> dict[str, Any]:
    return {
        "command_id": "01HZ3P00000000000000000001",
        "executor": "cluster-eu-1",
        "kind": "lease",
        "job_id": JOB_ID,
        "run_id": RUN_ID,
        "queue": QUEUE,
        "job_set_id": JOB_SET,
        "node": "gpu-node-17",
        "spec": job_submitted(),
        "grace_period_seconds": None,
        "reason": None,
        "created": T0 + 5_001,
    }


def executor_report() -> dict[str, Any]:
    return {
        "executor": "cluster-eu-1",
        "pool": "gpu-eu",
        "time": T0 + 10_000,
        "nodes": [
            {
                "name": "gpu-node-17",
                "allocatable": {"cpu": "95", "memory": "1100Gi", "nvidia.com/gpu": "8", "ephemeral-storage": "7Ti"},
                "labels": {"topology.kubernetes.io/zone": "eu-west-1a", "node.kubernetes.io/instance-type": "p4d.24xlarge"},
                "taints": [
                    {"key": "nvidia.com/gpu", "value": None, "effect": "NoSchedule"},
                    {"key": "spot", "value": "true", "effect": "NoExecute"},
                ],
                "unschedulable": False,
                "non_flotilla_usage": {"cpu": "500m", "memory": "1Gi"},
            },
            {
                "name": "gpu-node-18",
                "allocatable": {"cpu": "95", "nvidia.com/gpu": "8"},
                "labels": {},
                "taints": [{"key": "node.kubernetes.io/unschedulable", "value": None, "effect": "NoSchedule"}],
                "unschedulable": True,
                "non_flotilla_usage": {},
            },
        ],
        "runs": [{"run_id": RUN_ID, "job_id": JOB_ID, "node": "gpu-node-17", "state": "running"}],
    }


def rejection() -> dict[str, Any]:
    return {
        "request_key": f"{QUEUE}/{JOB_SET}",
        "request_id": "req-8f14e45f",
        "queue": QUEUE,
        "job_set_id": JOB_SET,
        "item_index": 4,
        "client_id": None,
        "reason": "item 4: pod_spec is required",
        "payload": b"\xf1\x01\x00\xff garbage \x00\x80",
        "rejected_at": T0 + 1,
    }


SAMPLES = {
    "submit_request": submit_request,
    "event_sequence": event_sequence,
    "job_state": job_state,
    "job_submitted": job_submitted,
    "queue": queue,
    "executor_command": executor_command,
    "executor_report": executor_report,
    "rejection": rejection,
}


def written_with(writer: dict[str, Any], name: str) -> dict[str, Any]:
    """The sample of ``name`` as a writer with schema ``writer`` (a frozen release's) wrote it: a
    job state carried its spec until release v5 (its spec then moved to job-specs)."""
    record = readable_from(writer, name)
    if name == "job_state" and any(f["name"] == "spec" for f in writer["fields"]):
        record["spec"] = job_submitted()
    return record


def readable_from(writer: dict[str, Any], name: str) -> dict[str, Any]:
    """The sample of ``name`` as the current schemas read it back from a writer with schema ``writer``:
    all of it, but the events of kinds the writer's release did not have yet."""
    record = SAMPLES[name]()
    if name == "event_sequence":
        kinds = _payload_kinds(writer)
        record["events"] = [event for event in record["events"] if event["payload"][0] in kinds]
    return record


def _payload_kinds(writer: dict[str, Any]) -> set[str]:
    """The event kinds (the payload union's branches) of an event_sequence schema: a release before
    ExecutorSettingsUpserted (v6) wrote no such event."""
    (events,) = [f for f in writer["fields"] if f["name"] == "events"]
    (payload,) = [f for f in events["type"]["items"]["fields"] if f["name"] == "payload"]
    return {branch if isinstance(branch, str) else f"flotilla.{branch['name']}" for branch in payload["type"]}


def assert_contains(expected: Any, actual: Any, where: str = "") -> None:
    """``actual`` holds every value of ``expected``; keys it adds are defaults the producer omitted."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a record/map"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing after decode"
            assert_contains(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{where}: {actual!r} != {expected!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_contains(e, a, f"{where}[{i}]")
    else:
        assert actual == expected and type(actual) is type(expected), f"{where}: {actual!r} != {expected!r}"
