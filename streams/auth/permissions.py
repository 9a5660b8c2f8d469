"""Armada's permission model: administrators manage queues and act on any job; a queue's owners act on its jobs.

Pure: entry points authenticate first, then ask here before they write anything to the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streams.auth.errors import PermissionDenied
from streams.auth.principal import Principal
from streams.domain.queues import is_owner

# What a queue's owners may do with its jobs (Armada's queue verbs, plus preempt).
QUEUE_VERBS = frozenset({"submit", "cancel", "preempt", "reprioritize", "watch"})


@dataclass(frozen=True)
class Permissions:
    # Members of these groups hold every global permission (create, update and delete queues; act on any job).
    admin_groups: frozenset[str] = frozenset({"admins"})

    @classmethod
    def from_groups(cls, groups: Iterable[str]) -> Permissions:
        return cls(admin_groups=frozenset(group for group in groups if group))

    def is_admin(self, principal: Principal) -> bool:
        # The embedded default's anonymous caller exists only while everything is bound to 127.0.0.1.
        return principal.anonymous or not self.admin_groups.isdisjoint(principal.groups)

    def check_admin(self, principal: Principal, what: str) -> None:
        if not self.is_admin(principal):
            groups = ", ".join(sorted(self.admin_groups)) or "none configured"
            raise PermissionDenied(f"user {principal.user!r} may not {what}: that needs membership of an administrator group ({groups})")

    def may(self, principal: Principal, verb: str, queue: dict[str, Any]) -> bool:
        if verb not in QUEUE_VERBS:
            raise ValueError(f"unknown queue verb {verb!r}")
        return self.is_admin(principal) or is_owner(queue, principal.user, principal.groups)

    def check_queue(self, principal: Principal, verb: str, queue: dict[str, Any]) -> None:
        if not self.may(principal, verb, queue):
            raise PermissionDenied(
                f"user {principal.user!r} may not {verb} on queue {queue['name']!r}: not an owner, in an owner group or an administrator"
            )
