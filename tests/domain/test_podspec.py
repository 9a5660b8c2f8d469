"""The one conversion of a pod spec given whole: what Flotilla reads from it, what it refuses, and
what travels on untouched, the same for every way in (validation runs it for each submission)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.domain import jobspec
from streams.domain.podspec import PodSpecError, manifest_text, read_fields, refusals
from streams.domain.validation import SubmitPolicy, validate_item

KUBERNETES = {
    "containers": [
        {
            "name": "main",
            "image": "pytorch:2",
            "command": ["python"],
            "args": ["train.py", 3],
            "workingDir": "/work",
            "env": [{"name": "EPOCHS", "value": "3"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"containerPort": 8080, "name": "http"}],
            "resources": {
                "requests": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1},
                "limits": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1},
            },
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }
    ],
    "initContainers": [{"name": "fetch", "image": "busybox", "securityContext": {"runAsUser": 1000}}],
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": []}}],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    },
    "terminationGracePeriodSeconds": 30,
    "activeDeadlineSeconds": 600,
    "priorityClassName": "armada-preemptible",
    "restartPolicy": "Never",
    "serviceAccountName": "trainer",
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
}


def test_the_fields_flotilla_reads_come_from_the_kubernetes_spec() -> None:
    read = read_fields(KUBERNETES)
    (main,) = read["containers"]
    assert main["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
    }
    assert (main["command"], main["args"], main["working_dir"]) == (["python"], ["train.py", "3"], "/work")
    assert main["env"] == [{"name": "EPOCHS", "value": "3"}], "a valueFrom variable is the cluster's to fill in"
    assert main["ports"] == [{"container_port": 8080, "protocol": "TCP", "name": "http"}]
    assert read["init_containers"][0]["name"] == "fetch" and read["init_containers"][0]["resources"] == {"requests": {}, "limits": {}}
    assert read["node_selector"] == {"disk": "ssd"}
    assert read["tolerations"] == [{"key": "gpu", "operator": "Exists", "value": None, "effect": "NoSchedule", "toleration_seconds": 30}]
    assert read["affinity"] == {
        "node_affinity": {"required": [{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    }
    assert (read["termination_grace_period_seconds"], read["active_deadline_seconds"]) == (30, 600)
    assert (read["priority_class_name"], read["restart_policy"], read["service_account_name"]) == ("armada-preemptible", "Never", "trainer")
    assert jobspec.pod_spec(read) == {**read, "manifest": None}, "what is read is the contract's typed subset, complete"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": {"main": {}}}, "pod spec: containers: expected a list, got dict"),
        ({"containers": ["main"]}, "pod spec: containers[0]: expected an object, got str"),
        (
            {"containers": [{"resources": {"requests": {"cpu": [1]}}}]},
            "pod spec: containers[0].resources.requests.cpu: [1] is not a quantity",
        ),
        ({"nodeSelector": {"gpu": True}}, "pod spec: nodeSelector['gpu'] = True must be a string"),
        ({"priorityClassName": 7}, "pod spec: priorityClassName: expected a string, got 7"),
        ({"affinity": {"nodeAffinity": []}}, "pod spec: affinity.nodeAffinity: expected an object, got list"),
    ],
)
def test_a_malformed_spec_is_named_by_its_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PodSpecError) as raised:
        read_fields(spec)
    assert str(raised.value) == message


def test_node_name_is_always_refused_and_host_namespaces_unless_allowed() -> None:
    spec = {"nodeName": "n1", "hostNetwork": True, "hostPID": True, "hostIPC": False}
    refused = refusals(spec, allow_host_namespaces=False)
    assert len(refused) == 3
    assert refused[0].startswith("pod spec field nodeName is refused: the scheduler binds the pod to the node it chooses")
    assert (
        "pod spec field hostNetwork is refused: the scheduler's configuration forbids host namespaces (submission.allowHostNamespaces)"
        in refused
    )
    assert refusals(spec, allow_host_namespaces=True) == [refused[0]]
    assert refusals(KUBERNETES, allow_host_namespaces=False) == []


def test_a_manifest_is_carried_as_json_text() -> None:
    assert json.loads(manifest_text({"containers": []}) or "") == {"containers": []}
    assert manifest_text('{"containers": []}') == '{"containers": []}' and manifest_text(None) is None
    with pytest.raises(TypeError, match="must be a Kubernetes pod spec"):
        manifest_text(["containers"])


def validate(pod_spec: dict[str, Any], policy: SubmitPolicy | None = None) -> tuple[dict[str, Any] | None, str | None]:
    return validate_item({"priority": 1.0, "pod_spec": pod_spec}, policy or SubmitPolicy())


def test_submission_reads_the_manifest_and_keeps_it_as_given() -> None:
    job, reason = validate({"manifest": KUBERNETES})
    assert reason is None and job is not None
    spec = job["pod_spec"]
    assert json.loads(spec["manifest"]) == KUBERNETES
    assert spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert spec["active_deadline_seconds"] == 600 and spec["priority_class_name"] == "armada-preemptible"


def test_fields_beside_a_manifest_are_replaced_by_what_it_says() -> None:
    """A producer cannot make the scheduler read one thing while the cluster runs another."""
    job, reason = validate({"manifest": KUBERNETES, "node_selector": {"disk": "hdd"}, "containers": []})
    assert reason is None and job is not None
    assert job["pod_spec"]["node_selector"] == {"disk": "ssd"} and len(job["pod_spec"]["containers"]) == 1


@pytest.mark.parametrize(
    ("pod_spec", "reason"),
    [
        ({"manifest": "{not json"}, "pod spec: the manifest is not JSON"),
        ({"manifest": "[1, 2]"}, "pod spec: the manifest must be a JSON object (a Kubernetes PodSpec), not list"),
        ({"manifest": {**KUBERNETES, "nodeName": "node-7"}}, "pod spec field nodeName is refused"),
        ({"manifest": {**KUBERNETES, "hostNetwork": True}}, "pod spec field hostNetwork is refused"),
        ({"manifest": {**KUBERNETES, "containers": []}}, "pod spec has no containers"),
        ({"manifest": {**KUBERNETES, "terminationGracePeriodSeconds": 3600}}, "above the maximum of 300 s"),
        ({"manifest": {**KUBERNETES, "volumes": [{"name": "x" * 70_000}]}}, "over the limit of 65535 bytes"),
        ({"manifest": 7}, "malformed job item"),
    ],
)
def test_a_manifest_is_refused_with_the_reason(pod_spec: dict[str, Any], reason: str) -> None:
    job, found = validate(pod_spec)
    assert job is None and found is not None and reason in found, found


def test_host_namespaces_pass_where_the_configuration_allows_them() -> None:
    job, reason = validate({"manifest": {**KUBERNETES, "hostNetwork": True}}, SubmitPolicy(allow_host_namespaces=True))
    assert reason is None and job is not None and json.loads(job["pod_spec"]["manifest"])["hostNetwork"] is True
