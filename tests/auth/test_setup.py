"""From settings to the authenticator: anonymous only on loopback with no credentials; a worker refuses to be exposed without them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from streams.auth import ANONYMOUS, AuthConfigError, Principal, Unauthenticated
from streams.auth.oidc import OidcVerifier
from streams.auth.setup import build_authenticator, build_permissions, describe_access, is_loopback
from streams.config import Settings
from tests.auth.jwks_server import AUDIENCE, ISSUER, JwksServer, rsa_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text("t-alice: {user: alice}\nt-alice-laptop: {user: alice}\nt-root: {user: root, groups: [admins]}\n")
    return path


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_without_credentials_is_anonymous(host: str) -> None:
    auth = build_authenticator(Settings(web_host=host))
    assert auth.anonymous
    assert auth.authenticate(None) is ANONYMOUS
    assert describe_access(Settings(web_host=host)).startswith(f"anonymous, allowed because the API is bound to {host}")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "flotilla.example.com"])
def test_beyond_loopback_without_credentials_is_refused(host: str) -> None:
    for build in (build_authenticator, describe_access):
        with pytest.raises(AuthConfigError, match=f"refusing to serve the API on {host}.*FLOTILLA_AUTH_TOKEN_FILE"):
            build(Settings(web_host=host))


def test_is_loopback() -> None:
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "192.168.1.1", "example.com")] == [
        True, True, True, False, False, False,
    ]  # fmt: skip


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_with_a_token_file_callers_must_authenticate_wherever_bound(token_file: Path, host: str) -> None:
    settings = Settings(web_host=host, auth_token_file=str(token_file))
    auth = build_authenticator(settings)
    assert not auth.anonymous
    assert auth.authenticate("Bearer t-root") == Principal("root", ("admins",))
    with pytest.raises(Unauthenticated):
        auth.authenticate(None)
    assert describe_access(settings) == f"credentials required: bearer tokens from {token_file} (2 users); administrator groups: admins"


def test_a_broken_token_file_refuses_start_up(tmp_path: Path) -> None:
    (tmp_path / "tokens.yaml").write_text("t: {groups: [x]}\n")
    with pytest.raises(AuthConfigError, match="entry 1 needs a non-empty 'user'"):
        build_authenticator(Settings(auth_token_file=str(tmp_path / "tokens.yaml")))


def test_oidc_settings_wire_a_jwt_verifier() -> None:
    key = rsa_key("k1")
    with JwksServer([key]) as server:
        settings = Settings(
            web_host="0.0.0.0",
            oidc_jwks_url=server.url,
            oidc_issuer=ISSUER,
            oidc_audience=AUDIENCE,
            oidc_username_claim="email",
            admin_groups="admins, platform ,",
        )
        auth = build_authenticator(settings)
        try:
            assert not auth.anonymous
            token = key.sign({"sub": "u-1", "email": "alice@example.com", "groups": ["platform"]})
            principal = auth.authenticate(f"Bearer {token}")
            assert principal == Principal("alice@example.com", ("platform",))
            assert build_permissions(settings).is_admin(principal)
        finally:
            assert isinstance(auth.jwt, OidcVerifier)
            auth.jwt.keys.close()
        assert describe_access(settings) == (
            f"credentials required: OIDC JWTs from issuer {ISSUER}, audience {AUDIENCE} (keys {server.url}; "
            "user claim 'email', groups claim 'groups'); administrator groups: admins, platform"
        )


def test_an_unreachable_key_set_refuses_start_up() -> None:
    with JwksServer([]) as server:
        url = server.url
    with pytest.raises(AuthConfigError, match="OIDC key set: cannot fetch"):
        build_authenticator(Settings(oidc_jwks_url=url))


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
    return subprocess.run(
        [sys.executable, "-m", "streams.client.cli", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_bound_beyond_loopback_without_credentials_refuses_to_start(tmp_path: Path) -> None:
    # Port 1 has no broker: the refusal comes before the worker touches one.
    result = _run(["worker", "--web-host", "0.0.0.0", "--broker", "tansu://127.0.0.1:1", "--data-dir", str(tmp_path / "data")], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: refusing to serve the API on 0.0.0.0, beyond this machine, without authentication" in result.stderr
    assert not (tmp_path / "data").exists()


def test_flotilla_up_refuses_before_starting_anything(tmp_path: Path) -> None:
    result = _run(["up", "--state-dir", str(tmp_path / "state")], tmp_path, FLOTILLA_WEB_HOST="0.0.0.0")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refusing to serve the API on 0.0.0.0" in result.stderr
    assert not (tmp_path / "state").exists()


def test_a_worker_on_loopback_without_credentials_says_it_allows_anonymous_access(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
    # The line comes before the worker contacts a broker; port 1 has none, so the worker is stopped after it.
    worker = subprocess.Popen(
        [sys.executable, "-m", "streams.client.cli", "worker", "--broker", "tansu://127.0.0.1:1", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = threading.Timer(60, worker.kill)  # so a worker that never prints fails the test instead of hanging it
    deadline.start()
    try:
        assert worker.stdout is not None
        first = worker.stdout.readline()
    finally:
        deadline.cancel()
        worker.kill()
        worker.wait(10)
    assert first == (
        "API access: anonymous, allowed because the API is bound to 127.0.0.1 and no credentials are configured; "
        "set FLOTILLA_AUTH_TOKEN_FILE (bearer tokens) or FLOTILLA_OIDC_JWKS_URL (OIDC JWTs) to require credentials\n"
    )
