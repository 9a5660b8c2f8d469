"""Who is calling: a bearer token from the token file, an OIDC JWT, or (embedded default only) nobody.

Every entry point hands the raw `Authorization` value (HTTP header or gRPC metadata) to
`Authenticator.authenticate` and gets a `Principal` or an `Unauthenticated` with the reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from streams.auth.errors import AuthConfigError, Unauthenticated
from streams.auth.principal import ANONYMOUS, Principal

# Checks a JWT and returns its caller, or raises Unauthenticated (see streams/auth/oidc.py).
JwtVerifier = Callable[[str], Principal]


def _digest(token: str) -> str:
    # Tokens are looked up by digest, so a lookup's timing says nothing about a stored token.
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Authenticator:
    # sha256 of the token -> its caller
    tokens: Mapping[str, Principal] = field(default_factory=dict)
    jwt: JwtVerifier | None = None
    # True only for the embedded default bound to 127.0.0.1 with no credentials configured.
    anonymous: bool = False

    @classmethod
    def with_tokens(cls, tokens: Mapping[str, Principal], **kwargs: object) -> Authenticator:
        return cls(tokens={_digest(token): principal for token, principal in tokens.items()}, **kwargs)  # type: ignore[arg-type]

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization or not authorization.strip():
            if self.anonymous:
                return ANONYMOUS
            raise Unauthenticated("no credentials: send 'Authorization: Bearer <token>'")
        scheme, _, credential = authorization.strip().partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthenticated("unsupported credentials: send 'Authorization: Bearer <token>'")
        principal = self.tokens.get(_digest(credential))
        if principal is None and self.jwt is not None and credential.count(".") == 2:
            principal = self.jwt(credential)
        if principal is None:
            raise Unauthenticated("invalid token")
        return replace(principal, credentials=authorization.strip())


def load_token_file(path: Path) -> dict[str, Principal]:
    """A YAML (or JSON) mapping `token: {user: NAME, groups: [GROUP, ...]}`; any mistake names the entry."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise AuthConfigError(f"cannot read token file {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise AuthConfigError(f"token file {path} must map each token to {{user, groups}}")
    tokens: dict[str, Principal] = {}
    for number, (token, entry) in enumerate(raw.items(), start=1):
        if not isinstance(token, str) or not token.strip():
            raise AuthConfigError(f"token file {path}: entry {number} has an empty or non-text token")
        if not isinstance(entry, dict) or not isinstance(entry.get("user"), str) or not entry["user"]:
            raise AuthConfigError(f"token file {path}: entry {number} needs a non-empty 'user'")
        groups = entry.get("groups") or []
        if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
            raise AuthConfigError(f"token file {path}: entry {number} 'groups' must be a list of names")
        tokens[token.strip()] = Principal(user=entry["user"], groups=tuple(groups))
    return tokens
