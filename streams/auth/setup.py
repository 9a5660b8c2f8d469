"""The authenticator and permissions a worker serves with, from its settings, and the start-up line saying so."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from streams.auth.authenticator import Authenticator, load_token_file
from streams.auth.errors import AuthConfigError
from streams.auth.jwks import KeySet
from streams.auth.oidc import OidcSettings, OidcVerifier
from streams.auth.permissions import Permissions
from streams.auth.principal import Principal
from streams.config import Settings

_HOW = "set FLOTILLA_AUTH_TOKEN_FILE (bearer tokens) or FLOTILLA_OIDC_JWKS_URL (OIDC JWTs) to require credentials"


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
    """Raises AuthConfigError when the API would be open beyond this machine or its credentials cannot be loaded."""
    if not credentials_configured(settings):
        _refuse_open_exposure(settings)
        return Authenticator(anonymous=True)
    verifier = OidcVerifier(KeySet(settings.oidc_jwks_url).start(), oidc_settings(settings)) if settings.oidc_jwks_url else None
    return Authenticator.with_tokens(_tokens(settings), jwt=verifier)


def build_permissions(settings: Settings) -> Permissions:
    return Permissions.from_groups(group.strip() for group in settings.admin_groups.split(","))


def oidc_settings(settings: Settings) -> OidcSettings:
    return OidcSettings(
        issuer=settings.oidc_issuer,
        audience=settings.oidc_audience,
        username_claim=settings.oidc_username_claim,
        groups_claim=settings.oidc_groups_claim,
    )


def describe_access(settings: Settings) -> str:
    """For the start-up output: anonymous and why, or which credentials are required.

    Raises AuthConfigError like build_authenticator, so a launcher can refuse before it starts anything.
    """
    if not credentials_configured(settings):
        _refuse_open_exposure(settings)
        return f"anonymous, allowed because the API is bound to {settings.web_host} and no credentials are configured; {_HOW}"
    required = []
    if settings.auth_token_file:
        users = {principal.user for principal in _tokens(settings).values()}
        required.append(f"bearer tokens from {settings.auth_token_file} ({len(users)} users)")
    if settings.oidc_jwks_url:
        issuer = f"issuer {settings.oidc_issuer}" if settings.oidc_issuer else "any issuer"
        audience = f"audience {settings.oidc_audience}" if settings.oidc_audience else "any audience"
        required.append(
            f"OIDC JWTs from {issuer}, {audience} (keys {settings.oidc_jwks_url}; "
            f"user claim {settings.oidc_username_claim!r}, groups claim {settings.oidc_groups_claim!r})"
        )
    admins = ", ".join(sorted(build_permissions(settings).admin_groups)) or "none"
    return f"credentials required: {'; '.join(required)}; administrator groups: {admins}"


def _refuse_open_exposure(settings: Settings) -> None:
    if not is_loopback(settings.web_host):
        raise AuthConfigError(
            f"refusing to serve the API on {settings.web_host}, beyond this machine, without authentication: {_HOW}, or bind to 127.0.0.1"
        )


def _tokens(settings: Settings) -> dict[str, Principal]:
    return load_token_file(Path(settings.auth_token_file)) if settings.auth_token_file else {}
