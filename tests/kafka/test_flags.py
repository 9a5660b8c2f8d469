"""The Kafka flags of `flotilla worker` and `flotilla-executor`, and their refusals before anything starts."""

from __future__ import annotations

import pytest

from executor.cli import build_parser
from executor.cli import main as executor_main
from streams.broker_options import broker_overrides
from streams.client.cli import main as flotilla_main
from streams.config import Settings


def test_the_flags_set_the_settings_of_their_names() -> None:
    args = build_parser().parse_args(
        [
            "--id=e1",
            "--kafka-security-protocol=SASL_SSL",
            "--kafka-sasl-mechanism=SCRAM-SHA-256",
            "--kafka-sasl-username=flotilla",
            "--kafka-sasl-password-file=/run/secrets/kafka",
            "--kafka-ssl-cafile=/etc/kafka/ca.pem",
            "--kafka-ssl-no-check-hostname",
            "--replication-factor=3",
            "--min-insync-replicas=2",
            "--events-retention-ms=-1",
            "--processing-guarantee=exactly_once",
        ]
    )
    settings = Settings.from_env({"FLOTILLA_KAFKA_SASL_USERNAME": "from-the-variable"}, **broker_overrides(args))
    assert (settings.kafka_security_protocol, settings.kafka_sasl_mechanism, settings.kafka_sasl_username) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "flotilla",
    )
    assert (settings.kafka_sasl_password_file, settings.kafka_ssl_cafile, settings.kafka_ssl_check_hostname) == (
        "/run/secrets/kafka",
        "/etc/kafka/ca.pem",
        False,
    )
    assert (settings.replication_factor, settings.min_insync_replicas, settings.processing_guarantee) == (3, 2, "exactly_once")


def test_flags_not_given_leave_the_variables() -> None:
    args = build_parser().parse_args(["--id=e1"])
    settings = Settings.from_env(
        {"FLOTILLA_KAFKA_SSL_CHECK_HOSTNAME": "false", "FLOTILLA_REPLICATION_FACTOR": "3"}, **broker_overrides(args)
    )
    assert (settings.kafka_ssl_check_hostname, settings.replication_factor) == (False, 3)


def test_there_is_no_password_flag() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--id=e1", "--kafka-sasl-password=x"])


def test_the_executor_refuses_kafka_settings_it_cannot_use_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    status = executor_main(["--id=e1", "--backend=fake", "--broker=kafka://127.0.0.1:1", "--kafka-security-protocol=SASL_SSL"])
    assert status == 2
    err = capsys.readouterr().err
    assert "Kafka settings: kafka_sasl_mechanism '' is not one of" in err and "kafka_sasl_username is needed with SASL_SSL" in err


def test_the_worker_refuses_exactly_once_on_the_embedded_broker_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    status = flotilla_main(["worker", "--broker=tansu://127.0.0.1:1", "--processing-guarantee=exactly_once"])
    assert status == 2
    assert "processing_guarantee exactly_once needs Kafka transactions, which the embedded broker (tansu://) does not have" in (
        capsys.readouterr().err
    )


def test_the_worker_refuses_a_bad_settings_file_with_status_2(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    assert flotilla_main(["worker", "--settings=/no/such/settings.yaml"]) == 2
    assert "settings file /no/such/settings.yaml: No such file or directory" in capsys.readouterr().err


def test_the_worker_has_no_password_flag_either(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        flotilla_main(["worker", "--kafka-sasl-password=x"])
    assert "unrecognized arguments: --kafka-sasl-password=x" in capsys.readouterr().err
