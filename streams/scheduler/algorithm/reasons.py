"""Reasons a user reads for a job left queued or preempted (Armada's wording where it has one)."""

from __future__ import annotations

import re

ROUND_LIMIT = "maximum resources scheduled"
QUEUE_CLASS_LIMIT = "resource limit exceeded"
GLOBAL_RATE_LIMIT = "global scheduling rate limit exceeded"
QUEUE_RATE_LIMIT = "queue scheduling rate limit exceeded"
QUEUE_CORDONED = "scheduling paused on queue"
GANG_EXCEEDS_GLOBAL_RATE = "gang would exceed global scheduling rate limit"
GANG_EXCEEDS_QUEUE_RATE = "gang would exceed queue scheduling rate limit"
GANG_EXCEEDS_GLOBAL_BURST = "gang cardinality too large: exceeds global max burst size"
GANG_EXCEEDS_QUEUE_BURST = "gang cardinality too large: exceeds queue max burst size"
GANG_DOES_NOT_FIT = "unable to schedule gang since minimum cardinality not met"
JOB_DOES_NOT_FIT = "job does not fit on any node"
LOOKBACK = "not considered: queue lookback limit reached"
FAIR_SHARE_PREEMPTED = "preempted to restore fair share: its queue was above its protected share of the pool"
URGENCY_PREEMPTED = "preempted by a job of higher priority"

# After these no new job can be scheduled this cycle.
TERMINAL = frozenset({ROUND_LIMIT, GLOBAL_RATE_LIMIT})
# After these no new job of the same queue can be scheduled this cycle.
QUEUE_TERMINAL = frozenset({QUEUE_RATE_LIMIT, QUEUE_CORDONED})
# Failures that identical jobs would repeat, so they are skipped for the rest of the cycle.
PROPERTY_OF_GANG = frozenset({GANG_EXCEEDS_GLOBAL_BURST, JOB_DOES_NOT_FIT, GANG_DOES_NOT_FIT})


def uniformity_not_indexed(label: str) -> str:
    return f"uniformity label {label} is not indexed"


def uniformity_no_nodes(label: str) -> str:
    return f"no nodes with uniformity label {label}"


def gang_incomplete(gang_id: str, present: int, cardinality: int) -> str:
    return f"gang {gang_id} incomplete: {present} of {cardinality} members submitted"


def not_considered(why: str) -> str:
    return f"not considered this cycle: {why}"


def unknown_class(name: str) -> str:
    return f"unknown priority class {name}"


def inactive_queue(name: str) -> str:
    return f"queue {name} is not active in this pool"


def node_or_class_gone(node: str, priority_class: str) -> str:
    return f"node {node} or priority class {priority_class} no longer known to the scheduler"


# The reasons above that name a gang, label, class, queue or node, as the kind of reason they are.
_KINDS = (
    (re.compile(r"^uniformity label .* is not indexed$"), "uniformity label is not indexed"),
    (re.compile(r"^no nodes with uniformity label "), "no nodes with uniformity label"),
    (re.compile(r"^gang .* incomplete: "), "gang incomplete"),
    (re.compile(r"^unknown priority class "), "unknown priority class"),
    (re.compile(r"^queue .* is not active in this pool$"), "queue is not active in this pool"),
    (re.compile(r"^node .* or priority class .* no longer known"), "node or priority class no longer known"),
)


def reason_kind(reason: str) -> str:
    """A reason without the names it carries, so that a metric label takes few values."""
    for pattern, kind in _KINDS:
        if pattern.search(reason):
            return kind
    return reason
