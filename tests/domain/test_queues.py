import math
from typing import Any

import pytest

from streams.domain.queues import is_owner, queue_weight, validate_queue


def accepted(body: dict[str, Any]) -> dict[str, Any]:
    queue, reason = validate_queue(body)
    assert queue is not None, reason
    return queue


def test_minimal_queue_normalised_with_defaults():
    queue, reason = validate_queue({"name": "team-a"})
    assert reason is None
    assert queue == {
        "name": "team-a",
        "priority_factor": 1.0,
        "user_owners": [],
        "group_owners": [],
        "cordoned": False,
        "labels": {},
        "resource_limits_by_priority_class_name": {},
    }


def test_limits_kept_as_floats():
    limits = {
        "armada-default": {"maximum_resource_fraction": {"cpu": 1}, "maximum_resource_fraction_by_pool": {"gpu": {"nvidia.com/gpu": 0.25}}}
    }
    queue = accepted({"name": "q", "resource_limits_by_priority_class_name": limits})
    assert queue["resource_limits_by_priority_class_name"] == {
        "armada-default": {
            "maximum_resource_fraction": {"cpu": 1.0},
            "maximum_resource_fraction_by_pool": {"gpu": {"nvidia.com/gpu": 0.25}},
        }
    }


@pytest.mark.parametrize("name", ["", "Team", "-a", "a-", "a_b", "a" * 64, None, 7])
def test_bad_names(name):
    queue, reason = validate_queue({"name": name})
    assert queue is None
    assert reason == (f"queue name {name!r} must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit")


@pytest.mark.parametrize("factor", [0, -1, math.inf, math.nan, "2", True])
def test_bad_priority_factor(factor):
    assert validate_queue({"name": "q", "priority_factor": factor}) == (None, f"priority_factor {factor!r} must be a finite number > 0")


@pytest.mark.parametrize("fraction", [-0.1, 1.5, math.nan])
def test_fraction_out_of_range(fraction):
    limits = {"pc": {"maximum_resource_fraction_by_pool": {"p": {"cpu": fraction}}}}
    assert validate_queue({"name": "q", "resource_limits_by_priority_class_name": limits}) == (
        None,
        f"resource limits for priority class 'pc' in pool 'p': fraction for 'cpu' is {fraction!r}, must be in [0, 1]",
    )


def test_owners_must_be_lists_of_names():
    assert validate_queue({"name": "q", "user_owners": "alice"}) == (None, "user_owners must be a list of non-empty names")
    assert validate_queue({"name": "q", "group_owners": [""]}) == (None, "group_owners must be a list of non-empty names")


def test_weight_is_inverse_priority_factor():
    assert queue_weight(accepted({"name": "q", "priority_factor": 4})) == 0.25


def test_ownership():
    open_queue = accepted({"name": "q"})
    owned = accepted({"name": "q", "user_owners": ["bob"], "group_owners": ["ml"]})
    assert is_owner(open_queue, "anyone", [])
    assert is_owner(owned, "bob", [])
    assert is_owner(owned, "carol", ["web", "ml"])
    assert not is_owner(owned, "carol", ["web"])
