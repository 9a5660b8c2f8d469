"""How `flotilla up` is told to stop: every signal that means "stop" ends in the Ctrl-C path, which stops
its children and the broker before it exits."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from streams.client.commands.services import _stop_on_signals

STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@pytest.fixture
def handlers_restored() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in STOPS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("signum", STOPS, ids=lambda signum: signal.Signals(signum).name)
def test_each_stop_signal_takes_the_ctrl_c_path(signum: int, handlers_restored: None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell hands it to a job started in the background
    _stop_on_signals()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler's exception ends the sleep at once
