"""Fixtures for integration tests: the real embedded broker and a control-plane worker per module.

One Tansu broker serves the whole session. Each test module runs its own worker subprocess, and a test its own executors (`executors`)
(`python -m streams.client.cli worker`, see `tests.integration.workers`); when a test fails, the
tail of every worker log is printed with it. Helpers live in importable modules
(`workers`, `log`, `helpers`, `pipeline`), never here.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from pluggy import Result

from ops.broker import EmbeddedBroker
from tests.integration.pipeline import Executors
from tests.integration.workers import STARTED, Worker, running_worker

# The report of a test's call phase, kept on its item for the fixture that prints worker logs.
CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    embedded = EmbeddedBroker(log_path=log).start()
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture(scope="module")
def worker(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Worker]:
    """One worker shared by the tests of a module."""
    with running_worker(broker, tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1]) as started:
        yield started


@pytest.fixture
def executors(worker: Worker, tmp_path: Path) -> Iterator[Executors]:
    """The test's executors (on the module's worker), stopped at its end."""
    started = Executors(worker, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(autouse=True)
def _worker_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = request.node.stash.get(CALL_REPORT, None)
    if report is not None and report.failed:
        for started in STARTED:
            print(started.tail())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[CALL_REPORT] = report
