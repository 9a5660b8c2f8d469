"""The command-line flags of the settings every process that talks to the broker shares.

`flotilla worker` and `flotilla-executor` both create the topics and connect to Kafka, so both
take the same flags, by the settings' own names (``--kafka-ssl-cafile`` sets ``kafka_ssl_cafile``).
Passwords have no flag: a command line is visible to every user of the machine; they come from
FLOTILLA_KAFKA_SASL_PASSWORD / FLOTILLA_KAFKA_SSL_KEY_PASSWORD or a file.
"""

from __future__ import annotations

import argparse
from typing import Any

from streams.config import PROCESSING_GUARANTEES, SASL_MECHANISMS, SECURITY_PROTOCOLS

# Flag -> (setting, type, help); each flag is the setting's name with dashes.
_VALUED: tuple[tuple[str, type, str], ...] = (
    ("replication_factor", int, "replication factor of the topics Flotilla creates (default 1)"),
    ("min_insync_replicas", int, "min.insync.replicas of the topics Flotilla creates (default 1; at most the replication factor)"),
    ("events_retention_ms", int, "retention.ms of the events topic, the source of truth (default -1: for ever)"),
    ("kafka_sasl_username", str, "SASL user name"),
    ("kafka_sasl_password_file", str, "file holding the SASL password (or FLOTILLA_KAFKA_SASL_PASSWORD)"),
    ("kafka_ssl_cafile", str, "PEM bundle of the CAs that sign the brokers' certificates (default: the system's)"),
    ("kafka_ssl_certfile", str, "client certificate (PEM) for mutual TLS"),
    ("kafka_ssl_keyfile", str, "client certificate's key (PEM); its password from FLOTILLA_KAFKA_SSL_KEY_PASSWORD"),
)
_CHOICES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("processing_guarantee", PROCESSING_GUARANTEES, "at_least_once (default) or exactly_once (Kafka transactions; not on tansu://)"),
    ("kafka_security_protocol", SECURITY_PROTOCOLS, "how clients connect to the brokers (default PLAINTEXT)"),
    ("kafka_sasl_mechanism", SASL_MECHANISMS, "SASL mechanism, with SASL_PLAINTEXT or SASL_SSL"),
)


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kafka (flags win over FLOTILLA_* variables, which win over the settings file)")
    group.add_argument(
        "--settings", metavar="FILE", dest="settings_file", help="YAML file of Flotilla settings by name (default $FLOTILLA_SETTINGS_FILE)"
    )
    for name, choices, help_text in _CHOICES:
        group.add_argument(_flag(name), dest=name, choices=choices, help=help_text)
    for name, kind, help_text in _VALUED:
        group.add_argument(_flag(name), dest=name, type=kind, help=help_text)
    group.add_argument(
        "--kafka-ssl-no-check-hostname",
        dest="kafka_ssl_check_hostname",
        action="store_const",
        const=False,
        help="accept broker certificates that do not name the address connected to (the CA chain is still checked)",
    )


def broker_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give, for `Settings.from_env` (None: not given)."""
    names = ["settings_file", "kafka_ssl_check_hostname", *(name for name, *_ in _CHOICES), *(name for name, *_ in _VALUED)]
    return {name: getattr(args, name) for name in names}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
