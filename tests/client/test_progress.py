"""The progress line every long command shares (`streams.client.progress`)."""

from __future__ import annotations

import io

import pytest

from streams.client.progress import Progress, on_stderr


def test_a_known_total_is_shown_with_what_is_left() -> None:
    out = io.StringIO()
    line = Progress("restored", "records", every_s=0.0, out=out)
    line.show(0, 1_000)
    line.show(500, 1_000)
    first, second = out.getvalue().splitlines()
    assert first == "  restored 0 of 1,000 records"
    assert second.startswith("  restored 500 of 1,000 records (") and "s left)" in second


def test_an_unknown_total_shows_the_count_and_rate_only() -> None:
    out = io.StringIO()
    line = Progress("read", "event sequences", every_s=0.0, out=out)
    line.show(0, None)
    line.show(10_000, None)
    assert out.getvalue().splitlines()[0] == "  read 0 event sequences"
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("  read 10,000 event sequences (") and " of " not in last and "left" not in last


def test_quiet_shows_nothing_and_each_phase_has_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    on_stderr(quiet=True)("read", "event sequences")(10_000, None)
    assert capsys.readouterr().err == ""
    phases = on_stderr()
    phases("read", "event sequences")(10_000, None)
    phases("replayed", "records of the scheduler feed")(5, 10)
    assert capsys.readouterr().err.splitlines() == ["  read 10,000 event sequences", "  replayed 5 of 10 records of the scheduler feed"]
