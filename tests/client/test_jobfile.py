"""Armada job files become submit requests that validate and encode; unsupported fields are named."""

from __future__ import annotations

import json

import pytest

from schemas.codec import encode
from streams.client.jobfile import JobFileError, load_job_file
from streams.domain import jobspec
from streams.domain.queues import validate_queue
from streams.domain.validation import SubmitPolicy, validate_request

QUEUE, _ = validate_queue({"name": "demo"})

FULL = """
queue: demo
jobSetId: nightly
jobs:
  - priority: 3
    namespace: team-a
    clientId: train-1
    labels: {app: train}
    annotations:
      armadaproject.io/gangId: g1
      armadaproject.io/gangCardinality: 1
    podSpec:
      terminationGracePeriodSeconds: 30
      activeDeadlineSeconds: 600
      priorityClassName: armada-preemptible
      restartPolicy: Never
      nodeSelector: {gpu: "true"}
      tolerations:
        - {key: gpu, operator: Equal, value: "true", effect: NoSchedule}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: zone, operator: NotIn, values: [z9]}
      containers:
        - name: main
          image: pytorch:latest
          command: [python, train.py]
          env: [{name: EPOCHS, value: "3"}]
          ports: [{containerPort: 8080}]
          resources:
            requests: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}
            limits: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}
    services: [{type: NodePort, ports: [8080]}]
    ingress: [{ports: [8080], tlsEnabled: true, certName: cert}]
"""


def test_a_full_job_file_becomes_a_valid_encodable_request() -> None:
    body = load_job_file(FULL)
    assert (body["queue"], body["job_set_id"]) == ("demo", "nightly")
    item = body["items"][0]
    spec = item["pod_spec"]["manifest"]  # the pod spec as written: the server reads what it needs from it
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1}
    assert item["annotations"]["armadaproject.io/gangCardinality"] == "1"
    assert item["ingresses"][0]["tls_enabled"] is True

    request = {"request_id": "r1", "user": "u", "groups": [], **body, "items": [jobspec.job_item(i) for i in body["items"]]}
    encode("submit_request", request)  # raises if the shape does not match the contract
    [result] = validate_request(request, QUEUE, SubmitPolicy())
    assert result.accepted and result.job is not None, result.reason
    assert result.job["priority_class"] == "armada-preemptible"
    read = result.job["pod_spec"]
    assert read["termination_grace_period_seconds"] == 30
    assert read["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert read["affinity"]["node_affinity"]["required"][0]["match_expressions"][0]["operator"] == "NotIn"
    assert read["tolerations"][0]["effect"] == "NoSchedule"


def test_fields_flotilla_does_not_read_travel_with_the_job() -> None:
    text = """
queue: demo
jobSetId: s
jobs:
  - podSpec:
      volumes: [{name: data, persistentVolumeClaim: {claimName: datasets}}]
      securityContext: {runAsNonRoot: true}
      initContainers:
        - {name: fetch, image: busybox, command: [true], securityContext: {readOnlyRootFilesystem: true}}
      containers:
        - name: main
          image: busybox
          env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
          volumeMounts: [{name: data, mountPath: /data}]
          resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}
"""
    body = load_job_file(text)
    request = {"request_id": "r1", "user": "u", "groups": [], **body, "items": [jobspec.job_item(i) for i in body["items"]]}
    [result] = validate_request(request, QUEUE, SubmitPolicy())
    assert result.accepted and result.job is not None, result.reason
    manifest = json.loads(result.job["pod_spec"]["manifest"])
    assert manifest["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}]
    assert manifest["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert result.job["pod_spec"]["containers"][0]["env"] == [], "a valueFrom variable exists in the cluster only"


def test_pod_specs_list_with_one_spec_is_accepted() -> None:
    body = load_job_file("queue: q\njobSetId: s\njobs:\n  - podSpecs:\n      - containers: []\n")
    assert body["items"][0]["pod_spec"] == {"manifest": {"containers": []}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("queue: q\njobs: []\n", "missing jobSetId"),
        ("queue: q\njobSetId: s\njobs: []\n", "missing jobs"),
        ("queue: q\njobSetId: s\nextra: 1\njobs: [{}]\n", "unsupported field(s) extra"),
        ("queue: q\njobSetId: s\njobs:\n  - podSpec: {containers: {main: {}}}\n", "jobs[0].podSpec.containers: expected a list, got dict"),
        ("queue: q\njobSetId: s\njobs:\n  - podSpec: [1]\n", "jobs[0].podSpec: expected a mapping, got list"),
        ("queue: q\njobSetId: s\njobs:\n  - podSpecs: [{}, {}]\n", "exactly one pod spec per job"),
        (
            "queue: q\njobSetId: s\njobs:\n  - podSpec:\n      containers:\n        - resources: {requests: {cpu: [1]}}\n",
            "jobs[0].podSpec.containers[0].resources.requests.cpu: [1] is not a quantity",
        ),
        ("queue: q\njobSetId: s\njobs: {a: 1}\n", "jobs: expected a list"),
        ("queue: [unclosed\n", "not valid YAML"),
        ("- just a list\n", "job file: expected a mapping"),
    ],
)
def test_bad_job_files_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(JobFileError) as error:
        load_job_file(text)
    assert message in str(error.value)
