"""The authenticator and permissions a worker serves with, from its settings."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from streams.auth.authenticator import Authenticator, load_token_file
from streams.auth.permissions import Permissions
from streams.config import Settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def credentials_configured(settings: Settings) -> bool:
    return bool(settings.auth_token_file or settings.oidc_jwks_url)


def build_authenticator(settings: Settings) -> Authenticator:
    """Raises ValueError when the API would be open to anyone beyond this machine."""
    if not credentials_configured(settings):
        if not is_loopback(settings.web_host):
            raise ValueError(
                f"the API is bound to {settings.web_host}, beyond this machine, with no authentication: "
                "set FLOTILLA_AUTH_TOKEN_FILE or FLOTILLA_OIDC_JWKS_URL, or bind to 127.0.0.1"
            )
        return Authenticator(anonymous=True)
    tokens = load_token_file(Path(settings.auth_token_file)) if settings.auth_token_file else {}
    return Authenticator.with_tokens(tokens)


def build_permissions(settings: Settings) -> Permissions:
    return Permissions.from_groups(group.strip() for group in settings.admin_groups.split(","))
