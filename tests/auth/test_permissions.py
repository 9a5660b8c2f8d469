"""Armada's model: administrator groups manage queues and act on any job; a queue's owners and owner groups act on its jobs."""

from __future__ import annotations

import pytest

from streams.auth import ANONYMOUS, PermissionDenied, Permissions, Principal
from streams.auth.permissions import QUEUE_VERBS

PERMISSIONS = Permissions.from_groups(["admins", "ops"])
OWNED = {"name": "team-a", "user_owners": ["alice"], "group_owners": ["team-a-devs"]}
OPEN = {"name": "open", "user_owners": [], "group_owners": []}

ADMIN = Principal("root", ("ops",))
OWNER = Principal("alice")
GROUP_MEMBER = Principal("carol", ("team-a-devs",))
OUTSIDER = Principal("mallory", ("team-b-devs",))


@pytest.mark.parametrize("verb", sorted(QUEUE_VERBS))
@pytest.mark.parametrize("principal", [ADMIN, OWNER, GROUP_MEMBER], ids=["admin", "owner", "owner-group"])
def test_admins_owners_and_owner_groups_may_act_on_the_queue(principal: Principal, verb: str) -> None:
    PERMISSIONS.check_queue(principal, verb, OWNED)


@pytest.mark.parametrize("verb", sorted(QUEUE_VERBS))
def test_an_outsider_may_not(verb: str) -> None:
    assert not PERMISSIONS.may(OUTSIDER, verb, OWNED)
    with pytest.raises(PermissionDenied, match=f"user 'mallory' may not {verb} on queue 'team-a'"):
        PERMISSIONS.check_queue(OUTSIDER, verb, OWNED)


def test_a_queue_without_owners_is_open_to_every_authenticated_caller() -> None:
    assert all(PERMISSIONS.may(OUTSIDER, verb, OPEN) for verb in QUEUE_VERBS)


def test_only_administrators_manage_queues() -> None:
    PERMISSIONS.check_admin(ADMIN, "create queues")
    for principal in (OWNER, GROUP_MEMBER, OUTSIDER):
        with pytest.raises(PermissionDenied, match=r"may not create queues: .*administrator group \(admins, ops\)"):
            PERMISSIONS.check_admin(principal, "create queues")


def test_the_embedded_defaults_anonymous_caller_is_an_administrator() -> None:
    assert PERMISSIONS.is_admin(ANONYMOUS)
    assert PERMISSIONS.may(ANONYMOUS, "cancel", OWNED)


def test_without_administrator_groups_nobody_authenticated_is_one() -> None:
    nobody = Permissions.from_groups(["", ""])
    assert nobody.admin_groups == frozenset()
    with pytest.raises(PermissionDenied, match="none configured"):
        nobody.check_admin(ADMIN, "delete queues")


def test_an_unknown_verb_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown queue verb 'delete'"):
        PERMISSIONS.may(ADMIN, "delete", OWNED)
