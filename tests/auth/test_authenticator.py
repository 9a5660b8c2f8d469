"""Bearer credentials: a known token names its caller; anything else is refused, and anonymous only with no credentials sent."""

from __future__ import annotations

import pytest

from streams.auth import ANONYMOUS, Authenticator, Principal, Unauthenticated

ALICE = Principal("alice", ("team-a",))


def authenticator(anonymous: bool = False) -> Authenticator:
    return Authenticator.with_tokens({"alice-token": ALICE}, anonymous=anonymous)


def refusal(auth: Authenticator, authorization: str | None) -> str:
    with pytest.raises(Unauthenticated) as refused:
        auth.authenticate(authorization)
    return str(refused.value)


@pytest.mark.parametrize("authorization", ["Bearer alice-token", "bearer alice-token", "  Bearer   alice-token  "])
def test_a_known_token_names_its_caller(authorization: str) -> None:
    assert authenticator().authenticate(authorization) == ALICE


def test_tokens_are_kept_only_as_digests() -> None:
    assert "alice-token" not in authenticator().tokens


@pytest.mark.parametrize("authorization", [None, "", "   "])
def test_missing_credentials_are_refused(authorization: str | None) -> None:
    assert refusal(authenticator(), authorization).startswith("no credentials")


@pytest.mark.parametrize("authorization", ["Basic YWxpY2U6cHc=", "Bearer", "Bearer   ", "alice-token", "Token alice-token"])
def test_other_schemes_and_empty_bearers_are_refused(authorization: str) -> None:
    assert refusal(authenticator(), authorization).startswith("unsupported credentials")


@pytest.mark.parametrize("token", ["wrong", "alice-token-x", "a.b.c"])
def test_unknown_tokens_are_refused(token: str) -> None:
    assert refusal(authenticator(), f"Bearer {token}") == "invalid token"


def test_anonymous_only_when_allowed_and_no_credentials_are_sent() -> None:
    assert authenticator(anonymous=True).authenticate(None) is ANONYMOUS
    assert authenticator(anonymous=True).authenticate("Bearer alice-token") == ALICE


def test_an_invalid_token_is_refused_even_when_anonymous_is_allowed() -> None:
    auth = authenticator(anonymous=True)
    assert refusal(auth, "Bearer wrong") == "invalid token"
    assert refusal(auth, "Basic YWxpY2U6cHc=").startswith("unsupported credentials")


def test_only_jwt_shaped_unknown_tokens_reach_the_jwt_verifier() -> None:
    seen: list[str] = []

    def verifier(token: str) -> Principal:
        seen.append(token)
        return Principal("from-jwt")

    auth = Authenticator.with_tokens({"x.y.z": ALICE}, jwt=verifier)
    assert auth.authenticate("Bearer x.y.z") == ALICE
    assert auth.authenticate("Bearer h.p.s") == Principal("from-jwt")
    assert refusal(auth, "Bearer opaque") == "invalid token"
    assert seen == ["h.p.s"]
