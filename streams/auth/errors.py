"""The two refusals every entry point maps to its protocol: 401 / UNAUTHENTICATED and 403 / PERMISSION_DENIED."""

from __future__ import annotations


class Unauthenticated(Exception):
    """No credentials where they are required, or credentials that do not check out."""


class PermissionDenied(Exception):
    """A known caller asked for something its queue ownership or groups do not allow."""
