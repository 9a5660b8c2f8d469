"""The two refusals every entry point maps to its protocol: 401 / UNAUTHENTICATED and 403 / PERMISSION_DENIED,
and the configuration error a worker refuses to start with."""

from __future__ import annotations


class Unauthenticated(Exception):
    """No credentials where they are required, or credentials that do not check out."""


class PermissionDenied(Exception):
    """A known caller asked for something its queue ownership or groups do not allow."""


class AuthConfigError(ValueError):
    """Authentication settings that cannot be served (unreadable token file, unreachable key set) or that would
    leave the API open beyond this machine: the worker prints the reason and exits instead of starting."""
