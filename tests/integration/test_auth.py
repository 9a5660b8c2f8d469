"""Authentication and permissions on the REST API of a real worker: a token file and OIDC JWTs checked
against a JWKS this test serves over HTTP.

401 without valid credentials, 403 for a caller outside a queue's owners or the administrator
groups, success for owners and administrators; and a refused call leaves no trace on the log
(queues, submissions, events).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.broker import EmbeddedBroker
from schemas.codec import decode
from tests.auth.jwks_server import AUDIENCE, ISSUER, JwksServer, SigningKey, rsa_key
from tests.integration.helpers import item
from tests.integration.workers import Worker, new_worker, poll

pytestmark = pytest.mark.integration

TOKENS = {
    "root-token": {"user": "root", "groups": ["admins"]},
    "alice-token": {"user": "alice", "groups": ["team-a"]},
    "bob-token": {"user": "bob", "groups": ["team-b"]},
}
ROOT, ALICE, BOB = "Bearer root-token", "Bearer alice-token", "Bearer bob-token"
QUEUE = "team-a"
# Callers whose every attempt in this module is refused: none of them may appear on the log.
REFUSED_USERS = {"bob", "mallory", "anonymous"}
REFUSED_PREFIX = "refused"
CONTROL_KINDS = {"flotilla.JobCancelRequested", "flotilla.JobPreemptRequested", "flotilla.JobReprioritised"}


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return rsa_key("it-key-1")


@pytest.fixture(scope="module")
def jwks(key: SigningKey) -> Iterator[JwksServer]:
    with JwksServer([key]) as served:
        yield served


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth-tokens") / "tokens.yaml"
    path.write_text(yaml.safe_dump(TOKENS))
    return path


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, jwks: JwksServer, token_file: Path) -> Iterator[Worker]:
    started = new_worker(broker, tmp_path_factory.mktemp("auth"), "auth")
    started.extra_env.update(
        FLOTILLA_AUTH_TOKEN_FILE=str(token_file),
        FLOTILLA_OIDC_JWKS_URL=jwks.url,
        FLOTILLA_OIDC_ISSUER=ISSUER,
        FLOTILLA_OIDC_AUDIENCE=AUDIENCE,
    )
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture(scope="module", autouse=True)
def queue(worker: Worker) -> None:
    status, body = call(worker, "POST", "/api/v1/queues", ROOT, {"name": QUEUE, "user_owners": ["alice"]})
    assert status == 201, body


def call(worker: Worker, method: str, path: str, authorization: str | None, body: Any = None) -> tuple[int, Any]:
    """One REST call as the caller ``authorization`` names; (status, JSON body) whatever the status."""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{worker.url}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        answer = json.loads(exc.read() or b"null")
        if exc.code == 401:
            assert exc.headers.get("WWW-Authenticate") == "Bearer"
        return exc.code, answer


def submit(worker: Worker, authorization: str | None, job_set: str, queue: str = QUEUE) -> tuple[int, Any]:
    return call(worker, "POST", "/api/v1/jobs", authorization, {"queue": queue, "job_set_id": job_set, "items": [item()]})


def submitted_job(worker: Worker, authorization: str, job_set: str) -> str:
    status, body = submit(worker, authorization, job_set)
    assert status == 200, body
    (job_id,) = body["job_ids"]
    return job_id


def queue_admin_writes() -> list[tuple[str, str, Any]]:
    """(method, path, body) of every call that needs an administrator; names are refused-* so any trace is found."""
    return [
        ("POST", "/api/v1/queues", {"name": f"{REFUSED_PREFIX}-queue"}),
        ("PUT", f"/api/v1/queues/{QUEUE}", {"priority_factor": 5.0, "user_owners": ["bob"]}),
        ("DELETE", f"/api/v1/queues/{QUEUE}", None),
        # Armada's cancel-any-jobs and preempt-any-jobs: even for the queue's owner
        ("POST", f"/api/v1/queues/{QUEUE}/preempt", {}),
        ("POST", f"/api/v1/queues/{QUEUE}/cancel", {"job_states": ["queued"]}),
        ("POST", "/api/v1/executors/any/cancel", {}),
    ]


def job_writes(job_id: str, job_set: str) -> list[tuple[str, str, Any]]:
    """Every call that needs the queue's ownership and writes: submit, and control of a job and of a job set."""
    return [
        ("POST", "/api/v1/jobs", {"queue": QUEUE, "job_set_id": job_set, "items": [item()]}),
        ("POST", f"/api/v1/jobs/{job_id}/cancel", {"reason": "refused"}),
        ("POST", f"/api/v1/jobs/{job_id}/preempt", None),
        ("POST", f"/api/v1/jobs/{job_id}/reprioritize", {"priority": 3}),
        ("POST", f"/api/v1/queues/{QUEUE}/jobsets/{job_set}/cancel", None),
        ("POST", f"/api/v1/queues/{QUEUE}/jobsets/{job_set}/reprioritize", {"priority": 3}),
    ]


def job_reads(job_id: str, job_set: str) -> list[tuple[str, str, Any]]:
    """Reads that need the queue's watch permission."""
    return [
        ("GET", f"/api/v1/jobs/{job_id}", None),
        ("GET", f"/api/v1/queues/{QUEUE}/jobsets/{job_set}/events?watch=false", None),
    ]


OPEN_READS = [("GET", "/api/v1/queues", None), ("GET", f"/api/v1/queues/{QUEUE}", None)]


def test_the_worker_says_which_credentials_it_requires(worker: Worker, token_file: Path, jwks: JwksServer) -> None:
    log = worker.log_path.read_text()
    assert (
        f"API access: credentials required: bearer tokens from {token_file} (3 users); "
        f"OIDC JWTs from issuer {ISSUER}, audience {AUDIENCE} (keys {jwks.url};"
    ) in log


def test_health_and_metrics_are_open(worker: Worker) -> None:
    request = urllib.request.Request(f"{worker.url}/metrics")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert call(worker, "GET", "/health", None) == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "no credentials"),
        ("Bearer not-a-token", "invalid token"),
        ("Basic cm9vdDpyb290LXRva2Vu", "unsupported credentials"),
        ("Bearer root-token-but-longer", "invalid token"),
    ],
    ids=["missing", "unknown", "basic", "near-miss"],
)
def test_calls_without_valid_credentials_are_401(worker: Worker, authorization: str | None, reason: str) -> None:
    job_id = submitted_job(worker, ALICE, "valid-401")
    job_set = f"{REFUSED_PREFIX}-401"
    for method, path, body in OPEN_READS + queue_admin_writes() + job_writes(job_id, job_set) + job_reads(job_id, job_set):
        status, answer = call(worker, method, path, authorization, body)
        assert (status, answer["error"][: len(reason)]) == (401, reason), (method, path, answer)


def test_bad_jwts_are_401_with_the_reason(worker: Worker, key: SigningKey) -> None:
    cases = {
        "token expired at": key.sign({"sub": "mallory", "exp": int(time.time()) - 3600}),
        "wrong issuer": key.sign({"sub": "mallory", "iss": "https://evil.test"}),
        "wrong audience": key.sign({"sub": "mallory", "aud": "someone-else"}),
        "bad signature": rsa_key(key.kid).sign({"sub": "mallory", "groups": ["admins"]}),
        "unknown key": rsa_key("other-kid").sign({"sub": "mallory", "groups": ["admins"]}),
    }
    for reason, token in cases.items():
        status, answer = call(worker, "POST", "/api/v1/queues", f"Bearer {token}", {"name": f"{REFUSED_PREFIX}-jwt"})
        assert (status, answer["error"][: len(reason)]) == (401, reason), answer


def test_a_non_admin_may_not_manage_queues(worker: Worker) -> None:
    for method, path, body in queue_admin_writes():
        status, answer = call(worker, method, path, ALICE, body)
        assert status == 403, (method, answer)
        assert "user 'alice' may not" in answer["error"] and "administrator group (admins)" in answer["error"]
    assert call(worker, "GET", f"/api/v1/queues/{QUEUE}", ALICE)[1]["user_owners"] == ["alice"]


def test_an_outsider_may_not_act_on_a_queue_it_does_not_own(worker: Worker) -> None:
    job_id = submitted_job(worker, ALICE, "owned")
    status, answer = submit(worker, BOB, f"{REFUSED_PREFIX}-outsider")
    assert (
        status == 403
        and answer["error"] == f"user 'bob' may not submit on queue {QUEUE!r}: not an owner, in an owner group or an administrator"
    )
    for method, path, body in job_writes(job_id, "owned") + job_reads(job_id, "owned"):
        status, answer = call(worker, method, path, BOB, body)
        assert status == 403, (method, path, answer)
        assert answer["error"].startswith("user 'bob' may not "), answer
    assert call(worker, "GET", f"/api/v1/jobs/{job_id}", ALICE)[1]["state"] == "queued"


def test_owners_and_administrators_succeed(worker: Worker, key: SigningKey) -> None:
    job_id = submitted_job(worker, ALICE, "by-owner")
    assert call(worker, "GET", f"/api/v1/jobs/{job_id}", ALICE)[0] == 200
    assert call(worker, "POST", f"/api/v1/jobs/{job_id}/reprioritize", ROOT, {"priority": 4})[0] == 202
    assert call(worker, "POST", f"/api/v1/jobs/{job_id}/cancel", ALICE, {"reason": "done"})[0] == 202
    # OIDC: the same rules, with the user and groups from the token's claims.
    oidc_alice = f"Bearer {key.sign({'sub': 'alice', 'groups': ['team-a']})}"
    assert submit(worker, oidc_alice, "by-owner-oidc")[0] == 200
    oidc_admin = f"Bearer {key.sign({'sub': 'carol', 'groups': ['admins']})}"
    status, queue = call(worker, "POST", "/api/v1/queues", oidc_admin, {"name": "by-oidc-admin"})
    assert status == 201 and queue["user_owners"] == ["carol"], queue  # a queue without owners belongs to its creator
    assert call(worker, "DELETE", "/api/v1/queues/by-oidc-admin", ROOT)[0] == 200


def test_refused_calls_leave_no_trace_on_the_log(worker: Worker, key: SigningKey) -> None:
    job_id = submitted_job(worker, ALICE, "traced")
    expired = f"Bearer {key.sign({'sub': 'mallory', 'groups': ['admins'], 'exp': 1})}"
    for authorization in (None, "Bearer nope", expired, BOB, ALICE):
        writes = queue_admin_writes() + ([] if authorization == ALICE else job_writes(job_id, f"{REFUSED_PREFIX}-trace"))
        for method, path, body in writes:
            status, answer = call(worker, method, path, authorization, body)
            assert status in (401, 403), (authorization, method, path, answer)
    # Writes that are allowed, after the refused ones: once they are on the log, anything refused would be too.
    marker = submitted_job(worker, ALICE, "marker")
    status, answer = call(worker, "POST", f"/api/v1/jobs/{marker}/cancel", ALICE)
    assert status == 202, answer
    (marker_event,) = answer["event_ids"]
    assert call(worker, "POST", "/api/v1/queues", ROOT, {"name": "marker"})[0] == 201

    queue_names = {(record.key or b"").decode() for record in worker.read(worker.topic("queues"))}
    assert "marker" in queue_names
    assert not {name for name in queue_names if name.startswith(REFUSED_PREFIX)}

    submissions = [decode("submit_request", record.value) for record in worker.read(worker.topic("submissions"))]
    assert any(request["job_set_id"] == "marker" for request in submissions)
    assert [r for r in submissions if r["user"] in REFUSED_USERS or r["job_set_id"].startswith(REFUSED_PREFIX)] == []

    def events() -> list[dict[str, Any]] | None:
        sequences = [decode("event_sequence", record.value) for record in worker.read(worker.topic("events"))]
        return sequences if any(e["event_id"] == marker_event for s in sequences for e in s["events"]) else None

    sequences = poll(events, 30, "the marker cancel request on the events topic")
    assert [s for s in sequences if s["user"] in REFUSED_USERS or s["job_set_id"].startswith(REFUSED_PREFIX)] == []
    # The owner's job was neither cancelled, preempted nor reprioritised by anyone refused.
    kinds = {e["payload"][0] for s in sequences for e in s["events"] if e["job_id"] == job_id}
    assert "flotilla.JobSubmitted" in kinds and not kinds & CONTROL_KINDS, kinds
    # Nor the queue changed by anyone but an administrator.
    assert call(worker, "GET", f"/api/v1/queues/{QUEUE}", ALICE)[1]["user_owners"] == ["alice"]
