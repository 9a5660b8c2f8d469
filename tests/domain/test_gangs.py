from streams.domain.validation import SubmitPolicy, validate_request
from tests.kit.jobs import QUEUE, gang, item, request

POLICY = SubmitPolicy()


def reasons(*items):
    return [r.reason for r in validate_request(request(*items), QUEUE, POLICY)]


def test_consistent_gang_accepted_and_marked_fail_fast():
    results = validate_request(request(gang("g", "2", "zone"), gang("g", "2", "zone")), QUEUE, POLICY)
    assert all(r.accepted for r in results)
    assert results[0].job is not None
    annotations = results[0].job["annotations"]
    assert annotations["armadaproject.io/failFast"] == "true"
    assert annotations["armadaproject.io/gangId"] == "g"


def test_gang_may_arrive_over_several_requests():
    assert reasons(gang("g", "3")) == [None]


def test_members_disagreeing_on_cardinality_all_rejected():
    assert reasons(gang("g", "2"), gang("g", "3"), item()) == [
        "gang 'g': members disagree on gangCardinality (2, 3)",
        "gang 'g': members disagree on gangCardinality (2, 3)",
        None,
    ]


def test_members_disagreeing_on_priority_class():
    preemptible = gang("g", "2", pod_spec__priority_class_name="armada-preemptible")
    assert reasons(gang("g", "2"), preemptible)[0] == ("gang 'g': members disagree on priority class (armada-default, armada-preemptible)")


def test_default_priority_class_counts_as_the_default_name():
    explicit = gang("g", "2", pod_spec__priority_class_name="armada-default")
    assert reasons(gang("g", "2"), explicit) == [None, None]


def test_members_disagreeing_on_uniformity_label():
    assert reasons(gang("g", "2", "zone"), gang("g", "2", "rack"))[1] == (
        "gang 'g': members disagree on gangNodeUniformityLabel (rack, zone)"
    )
    assert reasons(gang("g", "2", "zone"), gang("g", "2"))[1] == ("gang 'g': members disagree on gangNodeUniformityLabel (None, zone)")


def test_more_members_than_cardinality():
    assert reasons(gang("g", "2"), gang("g", "2"), gang("g", "2")) == ["gang 'g': 3 members submitted but gangCardinality is 2"] * 3


def test_other_gangs_in_the_request_are_unaffected():
    assert reasons(gang("a", "1"), gang("a", "1"), gang("b", "1")) == [
        "gang 'a': 2 members submitted but gangCardinality is 1",
        "gang 'a': 2 members submitted but gangCardinality is 1",
        None,
    ]


def test_cardinality_must_be_a_positive_integer():
    for bad in ("0", "-2", "two", "1.5"):
        assert reasons(gang("g", bad)) == [f"gang 'g': armadaproject.io/gangCardinality {bad!r} is not a positive integer"]


def test_cardinality_missing():
    raw = item(annotations={"armadaproject.io/gangId": "g"})
    assert reasons(raw) == ["gang 'g': annotation armadaproject.io/gangCardinality is missing"]


def test_gang_annotations_without_gang_id():
    raw = item(annotations={"armadaproject.io/gangCardinality": "2"})
    assert reasons(raw) == ["annotation armadaproject.io/gangCardinality is set but armadaproject.io/gangId is not"]


def test_individual_problems_and_gang_problems_are_both_reported():
    bad = gang("g", "1", priority=-1.0)
    assert reasons(bad, gang("g", "1")) == [
        "priority -1.0 must be a finite number >= 0; gang 'g': 2 members submitted but gangCardinality is 1",
        "gang 'g': 2 members submitted but gangCardinality is 1",
    ]
