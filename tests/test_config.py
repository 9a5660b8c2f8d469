"""Settings from FLOTILLA_* variables: each typed as its field, a bad value refused with the reason."""

from __future__ import annotations

import re
from pathlib import Path

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


def test_a_settings_file_is_read_below_variables_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "flotilla.yaml"
    path.write_text(
        "broker: kafka://kafka-0.kafka:9093\n"
        "partitions: 8\n"
        "replication_factor: 3\n"
        "min_insync_replicas: 2\n"
        "kafka_security_protocol: SASL_SSL\n"
        "kafka_ssl_check_hostname: false\n"
        "schedule_period_s: 2\n"
        "data_dir: /var/lib/flotilla\n"
    )
    settings = Settings.from_env({"FLOTILLA_SETTINGS_FILE": str(path), "FLOTILLA_PARTITIONS": "4"}, replication_factor=5)
    assert settings.broker == "kafka://kafka-0.kafka:9093"
    assert (settings.partitions, settings.replication_factor, settings.min_insync_replicas) == (4, 5, 2)  # variable, flag, file
    assert settings.kafka_ssl_check_hostname is False and settings.schedule_period_s == 2.0
    assert settings.data_dir == Path("/var/lib/flotilla")
    assert Settings.from_env({}, settings_file=str(path)).partitions == 8  # the flag names the file too


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("partitons: 4\n", "unknown setting 'partitons' (did you mean 'partitions'?)"),
        ("partitions: many\n", "partitions: invalid literal for int()"),
        ("partitions: 2.5\n", "partitions: 2.5 is not an integer"),
        ("early_ticks: 3\n", "early_ticks: 3 is not a boolean"),
        ("kafka_sasl_username: [a, b]\n", "kafka_sasl_username: ['a', 'b'] is not text"),
        ("- broker\n", "must be a mapping of setting names to values, not list"),
        ("broker: [\n", "is not YAML"),
    ],
)
def test_a_bad_settings_file_is_refused_with_the_setting_named(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "flotilla.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(problem)) as refused:
        Settings.from_env({"FLOTILLA_SETTINGS_FILE": str(path)})
    assert str(path) in str(refused.value)


def test_a_missing_settings_file_is_refused() -> None:
    with pytest.raises(ValueError, match="settings file /no/such.yaml: No such file or directory"):
        Settings.from_env({}, settings_file="/no/such.yaml")


def test_a_bad_variable_is_named() -> None:
    with pytest.raises(ValueError, match="^FLOTILLA_REPLICATION_FACTOR: invalid literal"):
        Settings.from_env({"FLOTILLA_REPLICATION_FACTOR": "three"})
