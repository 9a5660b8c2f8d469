"""The `flotilla` command line against a real worker and local executor, configured by its config file:
queues managed in armadactl's spelling, a job file submitted, its job set watched until every job
finished with the counts by state, a job cancelled by armadactl's QUEUE JOB_SET JOB_ID; and on a
worker with a token file, the token from the config file accepted and a bad one refused with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ops.broker import EmbeddedBroker
from tests.integration.pipeline import Executors
from tests.integration.workers import ROOT, Worker, new_worker, running_worker

pytestmark = pytest.mark.integration

FLOTILLA = Path(sys.executable).parent / "flotilla"
JOB = {
    "priority": 0,
    "podSpec": {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": "local",
                "command": ["sh", "-c"],
                "args": ["echo hello"],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    },
}
TOKENS = {"root-token": {"user": "root", "groups": ["admins"]}, "alice-token": {"user": "alice", "groups": ["team-a"]}}


class Cli:
    """Runs the installed `flotilla` with a home directory of its own and only the config file to find the server."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.config = home / ".flotilla" / "config.yaml"

    def configure(self, current: str, contexts: dict[str, dict[str, str]]) -> None:
        self.config.parent.mkdir(exist_ok=True)
        self.config.write_text(yaml.safe_dump({"currentContext": current, "contexts": contexts}))
        self.config.chmod(0o600)

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_")}
        env["HOME"] = str(self.home)
        return subprocess.run([str(FLOTILLA), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, timeout: float = 60) -> str:
        done = self(*args, timeout=timeout)
        assert done.returncode == 0, f"flotilla {' '.join(args)}: {done.stderr}"
        assert done.stderr == "", done.stderr
        return done.stdout


def job_file(path: Path, queue: str, job_set: str, count: int, script: str = "echo hello") -> Path:
    job = json.loads(json.dumps(JOB))
    job["podSpec"]["containers"][0]["args"] = [script]
    path.write_text(yaml.safe_dump({"queue": queue, "jobSetId": job_set, "jobs": [job] * count}))
    return path


def counts(line: str) -> dict[str, int]:
    """The counts at the start of a non-terminal watch line: `queued=0 leased=1 ... | <event>`."""
    return {state: int(n) for state, n in (pair.split("=") for pair in line.split(" | ", 1)[0].split())}


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with running_worker(broker, tmp_path_factory, "cli", FLOTILLA_SCHEDULE_PERIOD_S="0.5") as started:
        yield started


@pytest.fixture(scope="module")
def local(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    executors = Executors(worker, tmp_path_factory.mktemp("cli-executors"))
    executors.start("local", "local", "--nodes", "1", "--node-cpu", "4", "--node-memory", "4Gi")
    try:
        yield
    finally:
        executors.stop_all()


@pytest.fixture
def cli(worker: Worker, tmp_path: Path) -> Cli:
    found = Cli(tmp_path)
    found.configure("local", {"local": {"url": worker.url}})
    return found


def test_queues_are_created_updated_listed_and_deleted(cli: Cli) -> None:
    created = json.loads(
        cli.ok(
            "create",
            "queue",
            "cli-q",
            "--priority-factor",
            "2",
            "--owners",
            "alice,bob",
            "--group-owners",
            "team-a",
            "--labels",
            "tier=gold",
            "--json",
        )
    )
    assert (created["priority_factor"], created["user_owners"], created["labels"]) == (2.0, ["alice", "bob"], {"tier": "gold"})

    assert cli.ok("update", "queue", "cli-q", "--cordon", "--group-owners", "team-a,team-b") == (
        "updated queue cli-q (priority factor 2)\n"
    )
    queue = json.loads(cli.ok("get", "queue", "cli-q", "--json"))
    assert queue == {**created, "cordoned": True, "group_owners": ["team-a", "team-b"]}  # the rest kept
    assert "  owners           alice, bob\n" in cli.ok("get", "queue", "cli-q")

    table = cli.ok("get", "queues").splitlines()
    assert table[0].split() == ["NAME", "PRIORITY", "FACTOR", "CORDONED", "OWNERS", "GROUP", "OWNERS", "LABELS"]
    assert ["cli-q", "2", "yes", "alice,bob", "team-a,team-b", "tier=gold"] in [row.split() for row in table[1:]]
    assert cli.ok("queue", "list") == "\n".join(table) + "\n"  # the other spelling, the same command
    assert "cli-q" in [q["name"] for q in json.loads(cli.ok("get", "queues", "--json"))]

    assert cli.ok("delete", "queue", "cli-q") == "deleted queue cli-q\n"
    missing = cli("get", "queue", "cli-q")
    assert (missing.returncode, missing.stderr) == (1, "error: queue 'cli-q' does not exist (HTTP 404)\n")
    assert "cli-q" not in cli.ok("get", "queues")


def test_a_job_set_is_submitted_and_watched_until_every_job_finished(cli: Cli, local: None, tmp_path: Path) -> None:
    cli.ok("create", "queue", "cli-run")
    submitted = json.loads(cli.ok("submit", str(job_file(tmp_path / "jobs.yaml", "cli-run", "three", 3)), "--json"))
    job_ids = submitted["job_ids"]
    assert len(job_ids) == 3 and all(job_ids)

    first = cli.ok("watch", "cli-run", "three", "--no-follow").splitlines()
    assert first and counts(first[0])["queued"] == 1
    assert sum(counts(first[-1]).values()) == 3  # every job counted in exactly one state

    lines = cli.ok("watch", "cli-run", "three", "--exit-on-done", timeout=120).splitlines()
    assert counts(lines[-1]) == {
        "queued": 0,
        "leased": 0,
        "pending": 0,
        "running": 0,
        "succeeded": 3,
        "failed": 0,
        "cancelled": 0,
        "preempted": 0,
    }
    kinds = [line.split(" | ", 1)[1].split()[2] for line in lines]
    assert kinds.count("JobSubmitted") == 3 and kinds.count("JobSucceeded") == 3, kinds
    assert any(counts(line)["running"] for line in lines), "a job seen running on the way"

    replayed = cli.ok("watch", "cli-run", "three", "--no-follow", "--json").splitlines()
    assert [json.loads(line)["kind"] for line in replayed] == kinds


def test_a_job_named_as_armadactl_names_it_is_cancelled(cli: Cli, local: None, tmp_path: Path) -> None:
    cli.ok("create", "queue", "cli-cancel")
    submitted = cli.ok("submit", str(job_file(tmp_path / "slow.yaml", "cli-cancel", "slow", 1, "sleep 300")), "--json")
    (job_id,) = json.loads(submitted)["job_ids"]

    wrong = cli("cancel", "job", "cli-cancel", "other-set", job_id)
    assert wrong.returncode == 1
    assert wrong.stderr == f"error: job {job_id} is in job set slow of queue cli-cancel, not in job set other-set of queue cli-cancel\n"

    assert cli.ok("cancel", "job", "cli-cancel", "slow", job_id, "--reason", "not needed").startswith(
        f"cancel requested for job {job_id} (event "
    )
    lines = cli.ok("watch", "cli-cancel", "slow", "--exit-on-done", timeout=120).splitlines()
    assert counts(lines[-1])["cancelled"] == 1
    status = json.loads(cli.ok("job", "status", job_id, "--json"))
    assert status["state"] == "cancelled" and "not needed" in status["reason"]


# ---------------------------------------------------------------- with authentication


@pytest.fixture(scope="module")
def secured(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    directory = tmp_path_factory.mktemp("cli-auth")
    tokens = directory / "tokens.yaml"
    tokens.write_text(yaml.safe_dump(TOKENS))
    started = new_worker(broker, directory, "cli-auth")
    started.extra_env = {"FLOTILLA_AUTH_TOKEN_FILE": str(tokens)}
    try:
        yield started.start()
    finally:
        started.stop()


def test_the_config_files_token_is_sent_and_a_bad_one_is_refused_with_the_reason(secured: Worker, tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    cli.configure(
        "root",
        {
            "root": {"url": secured.url, "token": "root-token"},
            "alice": {"url": secured.url, "token": "alice-token"},
            "nobody": {"url": secured.url},
        },
    )
    assert cli.ok("create", "queue", "cli-secured") == "created queue cli-secured (priority factor 1)\n"
    assert "cli-secured" in cli.ok("get", "queues")

    bad = cli("--token", "wrong-token", "get", "queues")
    assert (bad.returncode, bad.stdout, bad.stderr) == (1, "", "error: invalid token (HTTP 401)\n")

    cli.ok("config", "use-context", "alice")
    assert cli.ok("config", "current-context") == "alice\n"
    refused = cli("create", "queue", "alices-own")
    assert (refused.returncode, refused.stderr) == (
        1,
        ("error: user 'alice' may not create queue 'alices-own': that needs membership of an administrator group (admins) (HTTP 403)\n"),
    )

    cli.ok("config", "use-context", "nobody")
    anonymous = cli("get", "queues")
    assert anonymous.returncode == 1
    assert anonymous.stderr.startswith("error: no credentials"), anonymous.stderr
    assert "no token was sent" in anonymous.stderr

    # the same token from a config file others can read still works, with a warning
    cli.config.chmod(0o644)
    loose = cli("--token", "root-token", "get", "queues")
    assert loose.returncode == 0 and "cli-secured" in loose.stdout
    assert loose.stderr == f"warning: {cli.config} holds tokens and can be read by group and others (mode 644): chmod 600 {cli.config}\n"
