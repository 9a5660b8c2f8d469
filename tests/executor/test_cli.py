"""`flotilla-executor`: backends built from the command line, and refusals with a reason and status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from executor.backends.fake import FakeBackend
from executor.backends.local.backend import LocalBackend
from executor.cli import build_backend, build_parser, main

EXAMPLE = Path(__file__).resolve().parents[2] / "executor" / "clusters" / "example.yaml"


def backend(*argv: str) -> object:
    return build_backend(build_parser().parse_args(["--id", "exec-1", *argv]))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["--id", "exec-1", *argv]) == 2
    return capsys.readouterr().err


def test_the_local_backend_defaults_to_two_local_nodes_and_a_state_dir_per_executor() -> None:
    local = backend("--backend", "local")
    assert isinstance(local, LocalBackend)
    assert local.runs_dir == Path(".flotilla/executors/exec-1/runs")
    nodes = local._nodes
    assert [n.name for n in nodes] == ["local-0", "local-1"]
    assert all(int(n.allocatable["cpu"]) >= 1 for n in nodes)


def test_local_nodes_and_pool_come_from_the_flags(tmp_path: Path) -> None:
    local = backend(
        "--backend", "local", "--nodes", "3", "--node-cpu", "2", "--node-memory", "1Gi", "--pool", "cpu", "--state-dir", str(tmp_path)
    )
    assert isinstance(local, LocalBackend)
    assert local.pool == "cpu"
    assert local.runs_dir == tmp_path / "runs"
    assert [(n.name, n.allocatable) for n in local._nodes][-1] == ("local-2", {"cpu": "2", "memory": "1Gi"})


def test_the_fake_backend_takes_a_cluster_spec_or_flags() -> None:
    from_spec = backend("--backend", "fake", "--cluster", str(EXAMPLE))
    assert isinstance(from_spec, FakeBackend)
    assert len(from_spec._nodes) == 12 and from_spec.runtime.seed == 1
    from_flags = backend("--backend", "fake", "--nodes", "4", "--pool", "sim")
    assert isinstance(from_flags, FakeBackend)
    assert [n.name for n in from_flags._nodes] == ["node-0", "node-1", "node-2", "node-3"]
    assert from_flags.pool == "sim"


def test_bad_command_lines_are_refused_with_a_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "must be letters, digits" in refused(capsys, "--id", "../etc", "--backend", "fake")
    assert "either --cluster or --nodes" in refused(capsys, "--backend", "fake", "--cluster", str(EXAMPLE), "--nodes", "2")
    assert "not options of the local backend: --cluster" in refused(capsys, "--backend", "local", "--cluster", str(EXAMPLE))
    assert "nodes.cpu: 'many' is not a quantity" in refused(capsys, "--backend", "fake", "--node-cpu", "many")
    assert "--nodes must be at least 1" in refused(capsys, "--backend", "local", "--nodes", "0")
    assert "cannot read cluster spec" in refused(capsys, "--backend", "fake", "--cluster", str(tmp_path / "missing.yaml"))


def test_a_kubernetes_backend_that_cannot_be_imported_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "executor.backends.kubernetes.backend", None)  # as if it were not installed
    assert "the kubernetes backend is not available" in refused(capsys, "--backend", "kubernetes")


def test_an_unreachable_broker_fails_with_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--id", "exec-1", "--backend", "fake", "--broker", "kafka://127.0.0.1:1"]) == 1
    assert "executor exec-1 failed" in capsys.readouterr().err
