"""Client tests run against a stub of the REST API (`stub_api`), in a home directory of their own,
so no user's config file or token reaches a test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.stub_api import StubApi, serving


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home directory, and none of the user's FLOTILLA_* client settings."""
    for name in ("FLOTILLA_CONFIG", "FLOTILLA_URL", "FLOTILLA_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubApi]:
    with serving() as stub:
        monkeypatch.setenv("FLOTILLA_URL", stub.url)
        yield stub
