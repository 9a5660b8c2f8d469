"""OIDC tokens against a real JWKS served over HTTP: what is accepted, and the precise reason for each refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from streams.auth import AuthConfigError, Authenticator, Principal, Unauthenticated
from streams.auth.jwks import KeySet
from streams.auth.oidc import OidcSettings, OidcVerifier
from tests.auth.jwks_server import AUDIENCE, ISSUER, JwksServer, SigningKey, ec_key, rsa_key

SETTINGS = OidcSettings(issuer=ISSUER, audience=AUDIENCE)


@pytest.fixture(scope="module")
def rsa() -> SigningKey:
    return rsa_key("rsa-1")


@pytest.fixture(scope="module")
def ec() -> SigningKey:
    return ec_key("ec-1")


@pytest.fixture
def server(rsa: SigningKey, ec: SigningKey) -> Iterator[JwksServer]:
    with JwksServer([rsa, ec]) as served:
        yield served


@pytest.fixture
def keys(server: JwksServer) -> Iterator[KeySet]:
    started = KeySet(server.url, fetch_timeout_s=2.0, min_refresh_interval_s=0.2).start()
    yield started
    started.close()


@pytest.fixture
def verify(keys: KeySet) -> OidcVerifier:
    return OidcVerifier(keys, SETTINGS)


def refusal(verify: OidcVerifier, token: str) -> str:
    with pytest.raises(Unauthenticated) as refused:
        verify(token)
    return str(refused.value)


def unsigned(header: dict[str, object], claims: dict[str, object], signature: bytes = b"") -> str:
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}.{b64(signature)}"


def claims(**extra: object) -> dict[str, object]:
    return {"sub": "mallory", "exp": int(time.time()) + 300, "iss": ISSUER, "aud": AUDIENCE, **extra}


# ----------------------------------------------------------------------------- accepted


def test_valid_rsa_and_ec_tokens_name_the_user_and_groups(verify: OidcVerifier, rsa: SigningKey, ec: SigningKey) -> None:
    assert verify(rsa.sign({"sub": "alice", "groups": ["team-a", "admins"]})) == Principal("alice", ("team-a", "admins"))
    assert verify(ec.sign({"sub": "bob"})) == Principal("bob", ())


def test_the_authenticator_hands_bearer_jwts_to_the_verifier(verify: OidcVerifier, rsa: SigningKey) -> None:
    auth = Authenticator.with_tokens({"static": Principal("ci")}, jwt=verify)
    assert auth.authenticate(f"Bearer {rsa.sign({'sub': 'alice'})}") == Principal("alice")
    assert auth.authenticate("Bearer static") == Principal("ci")
    with pytest.raises(Unauthenticated, match="wrong issuer"):
        auth.authenticate(f"Bearer {rsa.sign({'sub': 'alice', 'iss': 'https://elsewhere.test'})}")


def test_user_and_groups_claims_are_configurable(keys: KeySet, rsa: SigningKey) -> None:
    verify = OidcVerifier(keys, OidcSettings(issuer=ISSUER, audience=AUDIENCE, username_claim="preferred_username", groups_claim="roles"))
    token = rsa.sign({"sub": "0f3a-uuid", "preferred_username": "alice", "roles": ["ops"], "groups": ["ignored"]})
    assert verify(token) == Principal("alice", ("ops",))


def test_without_configured_issuer_and_audience_any_are_accepted(keys: KeySet, rsa: SigningKey) -> None:
    verify = OidcVerifier(keys, OidcSettings())
    assert verify(rsa.sign({"sub": "a", "iss": "https://any.test", "aud": "anything"})).user == "a"


def test_expiry_within_the_leeway_is_accepted(verify: OidcVerifier, rsa: SigningKey) -> None:
    assert verify(rsa.sign({"sub": "alice", "exp": int(time.time()) - 5})).user == "alice"


def test_verifying_reads_keys_from_memory_not_the_network(verify: OidcVerifier, server: JwksServer, rsa: SigningKey) -> None:
    fetched = server.fetches
    for _ in range(50):
        verify(rsa.sign({"sub": "alice"}))
    assert server.fetches == fetched == 1


# ----------------------------------------------------------------------------- refused, with the reason


def test_expired_token_is_refused_with_its_expiry(verify: OidcVerifier, rsa: SigningKey) -> None:
    assert refusal(verify, rsa.sign({"sub": "alice", "exp": int(time.time()) - 3600})).startswith("token expired at ")


def test_wrong_issuer_and_audience_are_refused(verify: OidcVerifier, rsa: SigningKey) -> None:
    assert refusal(verify, rsa.sign({"sub": "a", "iss": "https://evil.test"})) == f"wrong issuer: expected {ISSUER!r}"
    assert refusal(verify, rsa.sign({"sub": "a", "aud": "other-service"})) == f"wrong audience: expected {AUDIENCE!r}"


def test_missing_claims_are_named(verify: OidcVerifier, rsa: SigningKey) -> None:
    no_expiry = jwt.encode({"sub": "a", "iss": ISSUER, "aud": AUDIENCE}, rsa.private, algorithm="RS256", headers={"kid": rsa.kid})
    assert refusal(verify, no_expiry) == "token lacks the 'exp' claim"
    assert refusal(verify, rsa.sign({"groups": ["g"]})) == "token has no 'sub' claim naming the user"
    assert "'groups' must be a list" in refusal(verify, rsa.sign({"sub": "a", "groups": "admins"}))


def test_a_token_signed_by_another_key_under_a_known_kid_has_a_bad_signature(verify: OidcVerifier, rsa: SigningKey) -> None:
    impostor = rsa_key(rsa.kid)
    assert refusal(verify, impostor.sign({"sub": "alice"})).startswith("bad signature")


def test_alg_none_is_refused(verify: OidcVerifier, rsa: SigningKey) -> None:
    assert "'none' is not accepted" in refusal(verify, unsigned({"alg": "none", "kid": rsa.kid}, claims()))


def test_hmac_signed_with_the_public_key_is_refused(verify: OidcVerifier, rsa: SigningKey) -> None:
    # The classic confusion: the published public key used as an HMAC secret.
    public_pem = rsa.private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header, body, _ = unsigned({"alg": "HS256", "kid": rsa.kid, "typ": "JWT"}, claims()).split(".")
    signature = hmac.new(public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    token = f"{header}.{body}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
    assert "'HS256' is not accepted" in refusal(verify, token)


def test_a_key_is_used_only_with_its_own_algorithm(verify: OidcVerifier, rsa: SigningKey, ec: SigningKey) -> None:
    # An EC token naming the RSA key: the key cannot verify ES256 at all.
    assert "cannot verify ES256" in refusal(verify, ec.sign({"sub": "a"}, kid=rsa.kid))


def test_a_key_set_alg_binds_the_key(rsa: SigningKey) -> None:
    with JwksServer([replace(rsa, declared_alg="RS512")]) as server:
        keys = KeySet(server.url).start()
        try:
            assert (
                refusal(OidcVerifier(keys, SETTINGS), rsa.sign({"sub": "a"})) == f"token signed with RS256 but key {rsa.kid!r} is for RS512"
            )
        finally:
            keys.close()


@pytest.mark.parametrize("token", ["not-a-jwt.at.all", "a.b.c", unsigned({"alg": "RS256"}, {"sub": "a"}, b"x")[:-1] + "!"])
def test_malformed_tokens_are_refused(verify: OidcVerifier, token: str) -> None:
    assert refusal(verify, token).startswith("malformed token")


# ----------------------------------------------------------------------------- the key set


def test_unknown_kid_is_refused_then_a_rotated_key_is_picked_up(verify: OidcVerifier, server: JwksServer, rsa: SigningKey) -> None:
    rotated = rsa_key("rsa-2")
    token = rotated.sign({"sub": "alice"})
    assert refusal(verify, token).startswith("unknown key: signing key 'rsa-2' is not in the key set")
    server.keys = [rsa, rotated]
    deadline = time.monotonic() + 10
    while True:
        try:
            assert verify(token) == Principal("alice")
            break
        except Unauthenticated:
            assert time.monotonic() < deadline, "the rotated key was not fetched within 10 s"
            time.sleep(0.05)
    # The old key still works while the provider publishes it.
    assert verify(rsa.sign({"sub": "bob"})).user == "bob"


def test_unknown_kids_do_not_make_a_fetch_per_request(server: JwksServer, rsa: SigningKey) -> None:
    keys = KeySet(server.url, min_refresh_interval_s=60.0).start()
    try:
        verify = OidcVerifier(keys, SETTINGS)
        for number in range(20):
            refusal(verify, rsa.sign({"sub": "a"}, kid=f"made-up-{number}"))
        time.sleep(0.5)
        assert server.fetches == 1
    finally:
        keys.close()


def test_a_token_without_kid_needs_a_single_key_set(server: JwksServer, verify: OidcVerifier, rsa: SigningKey) -> None:
    token = jwt.encode(claims(sub="alice"), rsa.private, algorithm="RS256")
    assert "the token names no 'kid'" in refusal(verify, token)
    with JwksServer([rsa]) as single:
        keys = KeySet(single.url).start()
        try:
            assert OidcVerifier(keys, SETTINGS)(token).user == "alice"
        finally:
            keys.close()


def test_a_provider_outage_keeps_the_last_keys(server: JwksServer, keys: KeySet, verify: OidcVerifier, rsa: SigningKey) -> None:
    server.failing_status = 503
    keys.request_refresh()
    deadline = time.monotonic() + 10
    while server.fetches < 2:
        assert time.monotonic() < deadline, "no refresh attempted"
        time.sleep(0.05)
    assert verify(rsa.sign({"sub": "alice"})).user == "alice"


def test_key_set_from_a_file_url(tmp_path: Path, rsa: SigningKey) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [rsa.jwk()]}))
    keys = KeySet(path.as_uri()).start()
    try:
        assert OidcVerifier(keys, SETTINGS)(rsa.sign({"sub": "alice"})).user == "alice"
    finally:
        keys.close()


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("not json", "is not JSON"),
        ('{"no": "keys"}', "no 'keys' list"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}]}', "holds no public signing key"),
    ],
)
def test_an_unusable_key_set_refuses_start_up(tmp_path: Path, document: str, reason: str) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(document)
    with pytest.raises(AuthConfigError, match=reason):
        KeySet(path.as_uri()).start()


def test_an_unreachable_or_unsupported_key_set_url_refuses_start_up() -> None:
    with JwksServer([]) as server:
        url = server.url
    with pytest.raises(AuthConfigError, match="cannot fetch"):
        KeySet(url, fetch_timeout_s=2.0).start()
    with pytest.raises(AuthConfigError, match="must be http://, https:// or file://"):
        KeySet("ftp://idp.test/jwks.json").start()
