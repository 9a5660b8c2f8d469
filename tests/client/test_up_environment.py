"""What `flotilla up` hands its worker besides the ports: paths the user gave, made absolute."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.client.commands.services import _absolute_auth_paths


def test_a_relative_token_file_is_resolved_from_where_up_was_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLOTILLA_AUTH_TOKEN_FILE", "conf/tokens.yaml")
    assert _absolute_auth_paths() == {"FLOTILLA_AUTH_TOKEN_FILE": str(tmp_path / "conf" / "tokens.yaml")}


def test_no_token_file_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOTILLA_AUTH_TOKEN_FILE", raising=False)
    assert _absolute_auth_paths() == {}
