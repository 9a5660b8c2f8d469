import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.codec import Encoded
from streams.domain import jobspec
from streams.domain.quantity import QuantityError, to_milli
from streams.domain.resources import job_resource_request
from streams.domain.validation import (
    POD_SPEC_JSON,
    SubmitPolicy,
    _default_deadline,
    _resource_problems,
    _same_valid_quantities,
    validate_item,
    validate_request,
)
from tests.kit.jobs import QUEUE, container, item, request
from tests.schemas.strategies import values

POLICY = SubmitPolicy()


def reason_of(raw_item, policy=POLICY):
    job, reason = validate_item(raw_item, policy)
    assert job is None
    return reason


def accepted(raw_item, policy=POLICY):
    job, reason = validate_item(raw_item, policy)
    assert reason is None, reason
    return job


# --- envelope ---------------------------------------------------------------------------------


def test_unknown_queue_rejects_every_item():
    results = validate_request(request(item(), item(client_id="b")), None, POLICY)
    assert [r.reason for r in results] == ["queue 'team-a' does not exist"] * 2
    assert [r.client_id for r in results] == [None, "b"]


def test_empty_queue_name_is_rejected():
    results = validate_request(request(item(), queue=""), None, POLICY)
    assert results[0].reason == "queue is empty"


def test_empty_job_set_rejects_every_item():
    results = validate_request(request(item(), item(), job_set_id=""), QUEUE, POLICY)
    assert [r.reason for r in results] == ["job_set_id is empty"] * 2


def test_cordoned_queue_rejects():
    results = validate_request(request(item()), {**QUEUE, "cordoned": True}, POLICY)
    assert results[0].reason == "queue 'team-a' is cordoned and accepts no new jobs"


def test_ownership_checked_only_when_enabled():
    owned = {**QUEUE, "user_owners": ["bob"], "group_owners": ["ml"]}
    strict = SubmitPolicy(check_ownership=True)
    assert validate_request(request(item()), owned, POLICY)[0].accepted
    assert validate_request(request(item()), owned, strict)[0].reason == (
        "user 'alice' may not submit to queue 'team-a': not an owner or in an owner group"
    )
    assert validate_request(request(item(), groups=["ml"]), owned, strict)[0].accepted


def test_valid_request_answers_item_by_item():
    bad = item(pod_spec=None, client_id="bad")
    results = validate_request(request(item(client_id="good"), bad), QUEUE, POLICY)
    assert [(r.index, r.client_id, r.accepted) for r in results] == [(0, "good", True), (1, "bad", False)]
    assert results[0].job is not None and results[1].job is None
    assert results[1].reason == "pod_spec is missing"


# --- pod spec and containers ------------------------------------------------------------------


def test_missing_pod_spec():
    assert reason_of(item(pod_spec=None)) == "pod_spec is missing"


def test_no_containers():
    assert reason_of(item(pod_spec__containers=[])) == "pod spec has no containers"


def test_container_without_image():
    raw = container()
    raw["image"] = ""
    assert reason_of(item(pod_spec__containers=[raw])) == "container 'main' has no image"


@pytest.mark.parametrize(
    ("resources", "missing"),
    [
        ({"requests": {"cpu": "1"}}, "limits"),
        ({"limits": {"cpu": "1"}}, "requests"),
        ({}, "requests, limits"),
    ],
)
def test_missing_requests_or_limits(resources, missing):
    raw = {**container(), "resources": resources}
    assert reason_of(item(pod_spec__containers=[raw])) == (
        f"container 'main' must set resources.requests and resources.limits (missing: {missing})"
    )


def test_requests_and_limits_must_name_the_same_resources():
    raw = {**container(), "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "gpu": "1"}}}
    assert reason_of(item(pod_spec__containers=[raw])) == (
        "container 'main': requests and limits must name the same resources (only in requests: memory; only in limits: gpu)"
    )


def test_limits_must_equal_requests():
    raw = {**container(), "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
    assert reason_of(item(pod_spec__containers=[raw])) == (
        "container 'main': limits['cpu'] = '2' differs from requests['cpu'] = '1' (limits must equal requests)"
    )


def test_equal_quantities_in_different_units_are_equal():
    raw = {**container(), "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1024Mi"}}}
    accepted(item(pod_spec__containers=[raw]))


def test_non_numeric_quantity():
    raw = container(cpu="lots")
    assert reason_of(item(pod_spec__containers=[raw])) == (
        "container 'main': requests['cpu'] = 'lots' is not a quantity; container 'main': limits['cpu'] = 'lots' is not a quantity"
    )


def test_negative_quantity():
    raw = container(memory="-1Gi")
    assert reason_of(item(pod_spec__containers=[raw])) == (
        "container 'main': requests['memory'] = '-1Gi' is negative; container 'main': limits['memory'] = '-1Gi' is negative"
    )


def test_init_container_without_resources_is_allowed_but_partial_resources_are_not():
    accepted(item(pod_spec__init_containers=[{"name": "setup", "image": "busybox"}]))
    partial = {"name": "setup", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    assert reason_of(item(pod_spec__init_containers=[partial])) == (
        "init container 'setup' must set resources.requests and resources.limits (missing: limits)"
    )


def test_every_problem_is_reported_in_one_reason():
    raw = container(cpu="x")
    reason = reason_of(item(priority=-1.0, pod_spec__containers=[raw], pod_spec__priority_class_name="gold"))
    assert reason.split("; ") == [
        "priority -1.0 must be a finite number >= 0",
        "container 'main': requests['cpu'] = 'x' is not a quantity",
        "container 'main': limits['cpu'] = 'x' is not a quantity",
        "priority class 'gold' is not one of: armada-default, armada-preemptible",
    ]


def test_malformed_item_is_answered_not_raised():
    raw = {**container(), "env": [{"value": "no name"}]}
    assert reason_of(item(pod_spec__containers=[raw])) == "malformed job item: missing field 'name'"
    assert reason_of("not a dict").startswith("malformed job item: ")


# --- priority and priority class --------------------------------------------------------------


@pytest.mark.parametrize("priority", [-0.5, math.inf, math.nan])
def test_priority_must_be_finite_and_non_negative(priority):
    assert reason_of(item(priority=priority)) == f"priority {priority!r} must be a finite number >= 0"


def test_priority_must_be_a_number():
    assert reason_of(item(priority="high")) == "priority 'high' is not a number"


def test_unknown_priority_class():
    assert reason_of(item(pod_spec__priority_class_name="urgent")) == (
        "priority class 'urgent' is not one of: armada-default, armada-preemptible"
    )


def test_default_priority_class_applied():
    job = accepted(item())
    assert job["priority_class"] == "armada-default"
    assert job["pod_spec"]["priority_class_name"] == "armada-default"


def test_configured_priority_classes():
    policy = SubmitPolicy(priority_classes=frozenset({"batch", "urgent"}), default_priority_class="batch")
    assert accepted(item(), policy)["priority_class"] == "batch"
    assert accepted(item(pod_spec__priority_class_name="urgent"), policy)["priority_class"] == "urgent"
    with pytest.raises(ValueError, match="default priority class 'x' is not a known class"):
        SubmitPolicy(default_priority_class="x")


# --- termination grace period -----------------------------------------------------------------


@pytest.mark.parametrize("given", [None, 0])
def test_grace_period_unset_or_zero_becomes_minimum(given):
    job = accepted(item(pod_spec__termination_grace_period_seconds=given))
    assert job["pod_spec"]["termination_grace_period_seconds"] == 1


def test_grace_period_within_bounds_is_kept():
    assert accepted(item(pod_spec__termination_grace_period_seconds=300))["pod_spec"]["termination_grace_period_seconds"] == 300


def test_grace_period_between_zero_and_minimum_rejected():
    assert reason_of(item(pod_spec__termination_grace_period_seconds=0.5)) == (
        "termination_grace_period_seconds 0.5 is below the minimum of 1 s (use 0 for the minimum)"
    )
    policy = SubmitPolicy(min_termination_grace_period_s=5)
    assert reason_of(item(pod_spec__termination_grace_period_seconds=3), policy) == (
        "termination_grace_period_seconds 3 is below the minimum of 5 s (use 0 for the minimum)"
    )


def test_grace_period_above_maximum_rejected():
    assert reason_of(item(pod_spec__termination_grace_period_seconds=301)) == (
        "termination_grace_period_seconds 301 is above the maximum of 300 s"
    )
    policy = SubmitPolicy(max_termination_grace_period_s=30)
    assert reason_of(item(pod_spec__termination_grace_period_seconds=31), policy) == (
        "termination_grace_period_seconds 31 is above the maximum of 30 s"
    )


def test_grace_period_negative_or_fractional_rejected():
    assert reason_of(item(pod_spec__termination_grace_period_seconds=-3)) == ("termination_grace_period_seconds -3 is negative")
    assert reason_of(item(pod_spec__termination_grace_period_seconds=2.5)) == (
        "termination_grace_period_seconds 2.5 is not a whole number of seconds"
    )


# --- active deadline --------------------------------------------------------------------------


def test_cpu_job_gets_three_day_deadline():
    assert accepted(item())["pod_spec"]["active_deadline_seconds"] == 3 * 24 * 3600


def test_gpu_job_gets_fourteen_day_deadline():
    gpu = container(cpu="4", memory="8Gi", gpu="1")
    assert accepted(item(pod_spec__containers=[gpu]))["pod_spec"]["active_deadline_seconds"] == 14 * 24 * 3600


def test_zero_gpu_request_is_a_cpu_job():
    gpu = container(cpu="4", gpu="0")
    assert accepted(item(pod_spec__containers=[gpu]))["pod_spec"]["active_deadline_seconds"] == 3 * 24 * 3600


def test_deadline_defaults_are_configurable_and_largest_match_wins():
    policy = SubmitPolicy(default_active_deadline_s=60, active_deadline_by_resource={"nvidia.com/gpu": 600, "fpga": 900})
    both = container(cpu="1", fpga="1", gpu="1")
    assert accepted(item(), policy)["pod_spec"]["active_deadline_seconds"] == 60
    assert accepted(item(pod_spec__containers=[both]), policy)["pod_spec"]["active_deadline_seconds"] == 900


def test_explicit_deadline_kept_and_non_positive_rejected():
    assert accepted(item(pod_spec__active_deadline_seconds=120))["pod_spec"]["active_deadline_seconds"] == 120
    assert reason_of(item(pod_spec__active_deadline_seconds=0)) == ("active_deadline_seconds 0 must be a positive whole number of seconds")


# --- size, services ---------------------------------------------------------------------------


def test_pod_spec_over_armadas_limit_is_rejected_with_its_size():
    big = {**container(), "args": ["x" * 70_000]}
    reason = reason_of(item(pod_spec__containers=[big]))
    assert reason.startswith("pod spec is 70")
    assert reason.endswith(" bytes serialized, over the limit of 65535 bytes")
    size = int(reason.split()[3])
    assert 70_000 < size < 71_000


def test_pod_spec_size_is_of_its_compact_json_in_utf8_bytes():
    """40,000 characters that take two bytes each: over the limit in bytes, not in characters."""
    wide = {**container(), "args": ["é" * 40_000]}
    reason = reason_of(item(pod_spec__containers=[wide]))
    spec = jobspec.job_item(item(pod_spec__containers=[wide]))["pod_spec"]
    expected = len(json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    assert expected > 80_000 and reason.startswith(f"pod spec is {expected} bytes serialized")


def test_pod_spec_just_under_limit_accepted():
    filler = {**container(), "args": ["x" * 64_000]}
    accepted(item(pod_spec__containers=[filler]))


def test_service_type_and_ports_checked():
    services = [{"type": "LoadBalancer", "ports": [80]}, {"type": "NodePort", "ports": [0]}]
    assert reason_of(item(services=services)) == (
        "service type 'LoadBalancer' is not one of: NodePort, Headless; port 0 is not in 1..65535"
    )


def test_label_annotation_and_node_selector_values_must_be_strings():
    raw = item(labels={"version": 2}, annotations={"a": True}, pod_spec__node_selector={"zone": 1})
    assert reason_of(raw) == (
        "labels['version'] = 2 must be a string; annotations['a'] = True must be a string; node_selector['zone'] = 1 must be a string"
    )


# --- the payload ------------------------------------------------------------------------------


def test_payload_is_complete_job_submitted_record():
    job = accepted(item(client_id="c-1", priority=5, labels={"a": "b"}))
    assert set(job) == {
        "priority",
        "priority_class",
        "client_id",
        "namespace",
        "labels",
        "annotations",
        "pod_spec",
        "services",
        "ingresses",
    }
    assert job["priority"] == 5.0 and isinstance(job["priority"], float)
    assert job["namespace"] == "default" and job["client_id"] == "c-1" and job["labels"] == {"a": "b"}
    assert set(job["pod_spec"]["containers"][0]) == {
        "name",
        "image",
        "command",
        "args",
        "env",
        "working_dir",
        "resources",
        "ports",
    }


def test_validation_does_not_mutate_its_input():
    raw = item(pod_spec__termination_grace_period_seconds=None)
    before = repr(raw)
    accepted(raw)
    assert repr(raw) == before


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_pod_specs_json_is_never_over_the_bound_of_its_items_avro_size(data: st.DataObject) -> None:
    """What lets validation skip measuring an item read from the log: any item, escapes and all."""
    named = codec.schema("submit_request")["__named_schemas"]
    item = data.draw(values("flotilla.JobItem", named))
    request = {"request_id": "r", "queue": "q", "job_set_id": "s", "user": "u", "items": [item]}
    raw = codec.decode("submit_request", codec.encode("submit_request", request, validate_record=False), keep="flotilla.JobItem")
    (read,) = raw["items"]
    assert isinstance(read, Encoded)
    spec = jobspec.job_item(read)["pod_spec"]
    if spec is None or spec["manifest"] is not None:
        return  # no spec, or one given whole: measured as its text
    size = len(json.dumps(spec, separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= POD_SPEC_JSON.most(len(read.encoding))


def wire(raw: dict) -> dict:
    """A request of the item as a producer writes it (complete, as the schema has it)."""
    return request(jobspec.job_item(raw))


def test_an_item_read_from_the_log_over_the_limit_is_still_refused() -> None:
    """The bound only skips measuring small items: a large one is measured, and refused."""
    big = {**container(), "args": ["x" * 70_000]}
    read = codec.decode("submit_request", codec.encode("submit_request", wire(item(pod_spec__containers=[big]))), keep="flotilla.JobItem")
    (result,) = validate_request(read, QUEUE, SubmitPolicy())
    assert result.reason is not None and result.reason.startswith("pod spec is 70")
    small = codec.decode("submit_request", codec.encode("submit_request", wire(item())), keep="flotilla.JobItem")
    (accepted_item,) = validate_request(small, QUEUE, SubmitPolicy())
    assert accepted_item.reason is None


quantities = st.one_of(st.sampled_from(["1", "500m", "2Gi", "-1", "1Q", "", "0"]), st.integers(-2, 3), st.floats(-1, 2), st.booleans())
resource_maps = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3)


@given(requests=resource_maps, limits=resource_maps, same=st.booleans())
@example(requests={"memory": 1}, limits={"memory": True}, same=False)  # equal in Python, but True is no quantity
@example(requests={"memory": 0}, limits={"memory": -1e-05}, same=False)  # different values, the same quantity
@example(requests={"cpu": 0, "nvidia.com/gpu": 0}, limits={"cpu": 0, "nvidia.com/gpu": 0.0}, same=False)  # equal, not of one type
def test_a_containers_resources_pass_the_quick_check_exactly_when_the_full_check_finds_nothing(
    requests: dict[str, object], limits: dict[str, object], same: bool
) -> None:
    """The check decided once per distinct set of requests (`_same_valid_quantities`) passes a container only
    when the full one finds nothing, and agrees with it whenever requests and limits are the same values of
    the same types (limits of other values that parse to the same quantities, 0 and -1e-05, or 0 and 0.0,
    are left to the full check)."""
    limits = dict(requests) if same else limits
    quick, problems = _same_valid_quantities(requests, limits), _resource_problems("container 'main'", requests, limits)
    assert not (quick and problems)
    if typed(requests) == typed(limits):
        assert quick == (not problems)


def typed(resources: dict[str, object]) -> dict[str, tuple[type, object]]:
    return {name: (type(value), value) for name, value in resources.items()}


@pytest.mark.parametrize("resources", [{"cpu": "1"}, {"nvidia.com/gpu": "1", "cpu": "1"}, {"nvidia.com/gpu": "0", "cpu": "1"}])
def test_the_default_deadline_is_the_largest_of_the_resources_requested(resources: dict[str, str]) -> None:
    policy = SubmitPolicy()
    spec = jobspec.pod_spec(
        {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}]}
    )
    gpus = job_resource_request(spec).get("nvidia.com/gpu", 0) > 0
    expected = policy.active_deadline_by_resource["nvidia.com/gpu"] if gpus else policy.default_active_deadline_s
    assert _default_deadline(spec, policy) == expected


def test_true_is_not_a_quantity_even_once_1_0_was_one() -> None:
    assert to_milli(1.0) == 1000  # True == 1.0: an untyped memo answered True with 1.0's figure
    with pytest.raises(QuantityError):
        to_milli(True)


KEPT = "flotilla.JobItem"  # as the ingest agent reads a request


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_complete_item_read_from_the_log_is_judged_as_the_same_item_given_as_a_dict(data: st.DataObject) -> None:
    """An item read from the log that `is_complete` is judged as it is, not completed first: the answer is
    the one the same item gets as a plain dict (as REST gives it), and completing it changes nothing."""
    named = codec.schema("submit_request")["__named_schemas"]
    drawn = data.draw(values("flotilla.JobItem", named))
    if data.draw(st.booleans()):  # most drawn items are refused: judge valid ones too
        drawn = {**drawn, "pod_spec": item()["pod_spec"], "priority": 1.0, "annotations": {}, "services": [], "ingresses": []}
    body = codec.encode("submit_request", request(drawn), validate_record=False)
    (read,) = codec.decode("submit_request", body, keep=KEPT)["items"]
    (plain,) = codec.decode("submit_request", body)["items"]
    if jobspec.is_complete(read):
        assert jobspec.job_item(read) == read
    (from_log,) = validate_request(request(read), QUEUE, SubmitPolicy())
    (from_dict,) = validate_request(request(plain), QUEUE, SubmitPolicy())
    assert from_log == from_dict


@pytest.mark.parametrize("field", ["client_id", "namespace", "protocol"])
def test_an_item_with_fields_to_complete_is_not_complete(field: str) -> None:
    """Empty values that completing an item fills in: the item is completed before it is judged."""
    complete = jobspec.job_item(item(pod_spec__containers=[{**container(), "ports": [{"container_port": 80, "protocol": "TCP"}]}]))
    if field == "protocol":
        (main,) = complete["pod_spec"]["containers"]
        unnamed = {**main, "ports": [{"container_port": 80, "protocol": ""}]}
        changed = {**complete, "pod_spec": {**complete["pod_spec"], "containers": [unnamed]}}
    else:
        changed = {**complete, field: ""}
    (read,) = codec.decode("submit_request", codec.encode("submit_request", request(changed)), keep=KEPT)["items"]
    assert not jobspec.is_complete(read) and jobspec.job_item(read) != read
    (result,) = validate_request(request(read), QUEUE, SubmitPolicy())
    assert result.job is not None and result.job == validate_request(request(jobspec.job_item(read)), QUEUE, SubmitPolicy())[0].job
    assert result.job["namespace"] == "default" and result.job["client_id"] is None
    assert result.job["pod_spec"]["containers"][0]["ports"][0]["protocol"] == "TCP"


def test_a_gang_members_annotations_are_added_to_a_copy() -> None:
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "1"}
    (read,) = codec.decode("submit_request", codec.encode("submit_request", wire(item(annotations=gang))), keep=KEPT)["items"]
    (result,) = validate_request(request(read), QUEUE, SubmitPolicy())
    assert result.job is not None and result.job["annotations"]["armadaproject.io/failFast"] == "true"
    assert read["annotations"] == gang  # the item read is not changed
