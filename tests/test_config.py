"""Settings from FLOTILLA_* variables: each typed as its field, a bad value refused with the reason."""

from __future__ import annotations

import pytest

from streams.config import Settings


@pytest.mark.parametrize(("raw", "expected"), [("false", False), ("0", False), ("No", False), ("on", True), ("TRUE", True), ("1", True)])
def test_booleans_are_read_in_their_usual_spellings(raw: str, expected: bool) -> None:
    assert Settings.from_env({"FLOTILLA_EARLY_TICKS": raw}).early_ticks is expected


def test_a_boolean_that_is_none_is_refused() -> None:
    with pytest.raises(ValueError, match="'maybe' is not a boolean"):
        Settings.from_env({"FLOTILLA_EARLY_TICKS": "maybe"})


def test_numbers_and_defaults() -> None:
    settings = Settings.from_env({"FLOTILLA_SCHEDULE_PERIOD_S": "0.5", "FLOTILLA_PARTITIONS": "4"})
    assert (settings.schedule_period_s, settings.partitions, settings.early_ticks) == (0.5, 4, True)
