"""`--config` of `flotilla up` and `flotilla worker`: a wrong scheduler configuration stops both
before anything starts, with exit code 2 and every problem named by its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.client.cli import main


@pytest.fixture
def bad_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("FLOTILLA_SCHEDULER_CONFIG", "FLOTILLA_AUTH_TOKEN_FILE", "FLOTILLA_OIDC_JWKS_URL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "scheduler.yaml"
    path.write_text("scheduling:\n  maxRetries: -1\n  maximumSchedulingBurts: 5\n")
    return path


@pytest.mark.parametrize("command", [["up", "--broker-port", "1"], ["worker", "--broker", "kafka://127.0.0.1:1"]])
def test_a_wrong_configuration_is_refused_before_anything_starts(
    command: list[str], bad_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-dir", str(tmp_path / "state")] if command[0] == "up" else ["--data-dir", str(tmp_path / "data")]
    assert main([*command, *state, "--config", str(bad_config)]) == 2
    error = capsys.readouterr().err
    assert f"error: {bad_config}" in error
    assert "scheduling.maxRetries: must be at least 0, got -1" in error
    assert "scheduling.maximumSchedulingBurts: unknown setting (did you mean maximumSchedulingBurst?)" in error
    assert not (tmp_path / "state").exists() and not (tmp_path / "data").exists()
