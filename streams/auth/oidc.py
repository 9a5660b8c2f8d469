"""OIDC bearer JWTs: signature against the provider's key set, expiry, issuer and audience, then the caller.

Only public-key algorithms are accepted, and each token is verified with the algorithm its key is
bound to: `none` and HMAC (where a public key would double as the shared secret) never get as far as
a signature check. The user and groups come from configurable claims, as in Armada (`sub` and
`groups` by default; Keycloak puts names in `preferred_username`, Azure groups in `roles`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt

from streams.auth.errors import Unauthenticated
from streams.auth.jwks import KeySet
from streams.auth.principal import Principal

ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


@dataclass(frozen=True)
class OidcSettings:
    issuer: str = ""  # '' accepts any issuer
    audience: str = ""  # '' accepts any audience
    username_claim: str = "sub"
    groups_claim: str = "groups"
    # Clock skew allowed between the provider and this machine on exp, nbf and iat.
    leeway_s: float = 30.0


@dataclass(frozen=True)
class OidcVerifier:
    """A JwtVerifier for the Authenticator: the caller a valid token names, or Unauthenticated with the reason."""

    keys: KeySet
    settings: OidcSettings = OidcSettings()

    def __call__(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"malformed token: {exc}") from exc
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise Unauthenticated(f"token algorithm {algorithm!r} is not accepted: use one of {', '.join(sorted(ALGORITHMS))}")
        key = self._key(header.get("kid"), algorithm)
        claims = self._claims(token, key, algorithm)
        return Principal(user=self._user(claims), groups=self._groups(claims))

    def _key(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        found = self.keys.get(kid)
        if found is None:
            self.keys.request_refresh()
            named = f"signing key {kid!r}" if kid is not None else "a signing key (the token names no 'kid')"
            raise Unauthenticated(
                f"unknown key: {named} is not in the key set from {self.keys.url} "
                f"(fetched {self.keys.age_s:.0f}s ago; a refresh is under way, retry shortly)"
            )
        if found.get("alg", algorithm) != algorithm:
            raise Unauthenticated(f"token signed with {algorithm} but key {kid!r} is for {found['alg']}")
        try:
            return jwt.PyJWK(found, algorithm=algorithm)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"key {kid!r} cannot verify {algorithm}: {exc}") from exc

    def _claims(self, token: str, key: jwt.PyJWK, algorithm: str) -> dict[str, Any]:
        settings = self.settings
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=settings.issuer or None,
                audience=settings.audience or None,
                leeway=settings.leeway_s,
                options={"require": ["exp"], "verify_aud": bool(settings.audience)},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated(f"token expired {_expiry(token)}") from exc
        except jwt.InvalidIssuerError as exc:
            raise Unauthenticated(f"wrong issuer: expected {settings.issuer!r}") from exc
        except jwt.InvalidAudienceError as exc:
            raise Unauthenticated(f"wrong audience: expected {settings.audience!r}") from exc
        except jwt.InvalidSignatureError as exc:
            raise Unauthenticated("bad signature: the token was not signed by the key it names") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from exc
        except jwt.ImmatureSignatureError as exc:
            raise Unauthenticated(f"token not valid yet: {exc}") from exc
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"malformed token: {exc}") from exc

    def _user(self, claims: dict[str, Any]) -> str:
        user = claims.get(self.settings.username_claim)
        if not isinstance(user, str) or not user:
            raise Unauthenticated(f"token has no {self.settings.username_claim!r} claim naming the user")
        return user

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        groups = claims.get(self.settings.groups_claim, [])
        if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
            raise Unauthenticated(f"token claim {self.settings.groups_claim!r} must be a list of group names")
        return tuple(groups)


def _expiry(token: str) -> str:
    # Read only to word the refusal; the signature has been checked by then.
    exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    return f"at {datetime.fromtimestamp(exp, UTC):%Y-%m-%d %H:%M:%S} UTC" if isinstance(exp, (int, float)) else ""
