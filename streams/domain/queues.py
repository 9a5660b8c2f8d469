"""Queue definitions: validation into the ``queue`` record, weight and ownership."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

# Queue names become parts of topic keys, URLs and Kubernetes labels, so keep them DNS-label-like.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def validate_queue(raw: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(queue record, None)`` with every field present, or ``(None, reason)``."""
    try:
        return _normalise(raw), None
    except (ValueError, TypeError, AttributeError) as exc:
        return None, str(exc)


def queue_weight(queue: dict[str, Any]) -> float:
    """Armada's weight: a queue with priority factor 2 gets half the share of one with 1."""
    return 1.0 / queue["priority_factor"]


def is_owner(queue: dict[str, Any], user: str, groups: Iterable[str]) -> bool:
    """Owners and members of owner groups may submit, cancel, preempt, reprioritise and watch.

    A queue without owners is open to every authenticated caller.
    """
    users, owner_groups = queue.get("user_owners") or [], queue.get("group_owners") or []
    if not users and not owner_groups:
        return True
    return user in users or any(group in owner_groups for group in groups)


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"queue name {name!r} must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit")
    factor = raw.get("priority_factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"priority_factor {factor!r} must be a finite number > 0")
    limits = {
        priority_class: _class_limits(priority_class, value)
        for priority_class, value in (raw.get("resource_limits_by_priority_class_name") or {}).items()
    }
    return {
        "name": name,
        "priority_factor": float(factor),
        "user_owners": _strings("user_owners", raw.get("user_owners")),
        "group_owners": _strings("group_owners", raw.get("group_owners")),
        "cordoned": bool(raw.get("cordoned", False)),
        "labels": {str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        "resource_limits_by_priority_class_name": limits,
    }


def _strings(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{field} must be a list of non-empty names")
    return list(value)


def _class_limits(priority_class: str, raw: dict[str, Any]) -> dict[str, Any]:
    where = f"resource limits for priority class {priority_class!r}"
    by_pool = raw.get("maximum_resource_fraction_by_pool") or {}
    return {
        "maximum_resource_fraction": _fractions(where, raw.get("maximum_resource_fraction") or {}),
        "maximum_resource_fraction_by_pool": {
            pool: _fractions(f"{where} in pool {pool!r}", fractions) for pool, fractions in by_pool.items()
        },
    }


def _fractions(where: str, fractions: dict[str, Any]) -> dict[str, float]:
    result = {}
    for resource, fraction in fractions.items():
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction) or not 0 <= fraction <= 1:
            raise ValueError(f"{where}: fraction for {resource!r} is {fraction!r}, must be in [0, 1]")
        result[resource] = float(fraction)
    return result
