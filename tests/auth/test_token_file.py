"""The token file: a YAML mapping of bearer tokens to {user, groups}; every mistake refuses start-up and names the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.auth import AuthConfigError, Principal
from streams.auth.authenticator import load_token_file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    return path


def test_tokens_map_to_users_and_groups(tmp_path: Path) -> None:
    path = write(tmp_path, "s3cret-alice: {user: alice, groups: [team-a, admins]}\n' padded ': {user: bob}\n")
    assert load_token_file(path) == {"s3cret-alice": Principal("alice", ("team-a", "admins")), "padded": Principal("bob")}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "must map each token"),
        ("- a list\n", "must map each token"),
        ("tok: {user: alice}\n123: {user: bob}\n", "entry 2 has an empty or non-text token"),
        ("'  ': {user: alice}\n", "entry 1 has an empty or non-text token"),
        ("tok: alice\n", "entry 1 needs a non-empty 'user'"),
        ("tok: {groups: [a]}\n", "entry 1 needs a non-empty 'user'"),
        ("tok: {user: ''}\n", "entry 1 needs a non-empty 'user'"),
        ("tok: {user: alice, groups: admins}\n", "entry 1 'groups' must be a list of names"),
        ("tok: {user: alice, groups: [1]}\n", "entry 1 'groups' must be a list of names"),
        ("tok: {user: [alice\n", "cannot read token file"),
    ],
)
def test_mistakes_are_refused_with_the_entry(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(AuthConfigError, match=reason):
        load_token_file(write(tmp_path, text))


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="cannot read token file .*missing.yaml"):
        load_token_file(tmp_path / "missing.yaml")
