"""Gang annotations and their consistency across the members submitted in one request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GANG_ID = "armadaproject.io/gangId"
GANG_CARDINALITY = "armadaproject.io/gangCardinality"
GANG_NODE_UNIFORMITY_LABEL = "armadaproject.io/gangNodeUniformityLabel"
FAIL_FAST = "armadaproject.io/failFast"


@dataclass(frozen=True)
class GangMembership:
    gang_id: str
    cardinality: int
    node_uniformity_label: str | None


def parse_gang(annotations: dict[str, str]) -> GangMembership | None:
    """The item's gang, ``None`` for a lone job; ``ValueError`` with the reason if malformed."""
    gang_id = annotations.get(GANG_ID)
    if not gang_id:
        stray = [key for key in (GANG_CARDINALITY, GANG_NODE_UNIFORMITY_LABEL) if key in annotations]
        if stray:
            raise ValueError(f"annotation {stray[0]} is set but {GANG_ID} is not")
        return None
    raw = annotations.get(GANG_CARDINALITY)
    if raw is None:
        raise ValueError(f"gang {gang_id!r}: annotation {GANG_CARDINALITY} is missing")
    try:
        cardinality = int(str(raw).strip())
    except ValueError:
        cardinality = 0
    if cardinality <= 0:
        raise ValueError(f"gang {gang_id!r}: {GANG_CARDINALITY} {raw!r} is not a positive integer")
    return GangMembership(gang_id, cardinality, annotations.get(GANG_NODE_UNIFORMITY_LABEL) or None)


def gang_conflicts(members: Sequence[tuple[GangMembership, str]]) -> dict[str, str]:
    """Per gang id, why its members in one request cannot form a gang.

    ``members`` pairs each member with its (defaulted) priority class: all members must agree on
    cardinality, priority class and node-uniformity label, and a request cannot carry more
    members than the cardinality.
    """
    by_gang: dict[str, list[tuple[GangMembership, str]]] = {}
    for member in members:
        by_gang.setdefault(member[0].gang_id, []).append(member)
    conflicts: dict[str, str] = {}
    for gang_id, group in by_gang.items():
        problems = []
        for what, values in (
            ("gangCardinality", [m.cardinality for m, _ in group]),
            ("priority class", [pc for _, pc in group]),
            ("gangNodeUniformityLabel", [m.node_uniformity_label for m, _ in group]),
        ):
            distinct = sorted({str(v) for v in values})
            if len(distinct) > 1:
                problems.append(f"members disagree on {what} ({', '.join(distinct)})")
        cardinality = group[0][0].cardinality
        if not problems and len(group) > cardinality:
            problems.append(f"{len(group)} members submitted but gangCardinality is {cardinality}")
        if problems:
            conflicts[gang_id] = f"gang {gang_id!r}: " + "; ".join(problems)
    return conflicts
