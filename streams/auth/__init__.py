"""Who is calling (authentication) and what they may do (queue permissions), for REST and gRPC alike."""

from streams.auth.authenticator import Authenticator
from streams.auth.errors import AuthConfigError, PermissionDenied, Unauthenticated
from streams.auth.permissions import Permissions
from streams.auth.principal import ANONYMOUS, Principal

__all__ = ["ANONYMOUS", "AuthConfigError", "Authenticator", "PermissionDenied", "Permissions", "Principal", "Unauthenticated"]
