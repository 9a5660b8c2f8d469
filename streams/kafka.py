"""Every Kafka client Flotilla makes, built in one place from the settings checked once.

The Faust worker, the executors, the API's event readers, the queue replica, the log archive and its
restore, and the topic administration all connect through `KafkaClients`: a TLS or SASL setting
given to one client and forgotten in another would fail only in production, on the one path that
was missed. Producers always wait for every in-sync replica (``acks=all``); with the topics'
``min.insync.replicas`` (streams/topics.py) that is what makes an acknowledged write survive the
loss of a broker.

Exactly-once (``processing_guarantee: exactly_once``) hands Faust its Kafka transactions: its own
sends and source offsets commit atomically, its consumers read committed records only and its
producers are idempotent. Flotilla's batched hot path (streams/tables/batched.py) produces through
the app's idempotent producer outside those transactions and stays at-least-once with idempotent
handling, as on the embedded broker. Brokers without transactions (Tansu, the embedded default)
refuse it at start rather than fail at the first commit.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from streams import contiguous_fetch
from streams.config import PROCESSING_GUARANTEES, SASL_MECHANISMS, SECURITY_PROTOCOLS, Settings

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

# Every producer's acks: the leader answers once every in-sync replica has the record.
ACKS = "all"


class KafkaConfigError(ValueError):
    """Kafka settings a process cannot start with; the message names every problem and its setting."""


@dataclass(frozen=True)
class KafkaClients:
    """The connection every client shares: where the brokers are and how to authenticate to them."""

    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    def describe(self) -> str:
        """How clients connect, for the start-up line (no secret)."""
        parts = [self.security_protocol]
        if self.sasl_mechanism is not None:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        if self.ssl_context is not None:
            parts.append("hostname checked" if self.ssl_context.check_hostname else "hostname NOT checked")
        return ", ".join(parts)

    def options(self) -> dict[str, Any]:
        """The aiokafka keyword arguments every client takes: bootstrap servers and security."""
        options: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": self.security_protocol}
        if self.ssl_context is not None:
            options["ssl_context"] = self.ssl_context
        if self.sasl_mechanism is not None:
            options.update(
                sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username, sasl_plain_password=self.sasl_password
            )
        return options

    def producer_options(self, **options: Any) -> dict[str, Any]:
        if "acks" in options:
            raise TypeError("every Flotilla producer uses acks=all; do not pass acks")
        return {**self.options(), "acks": ACKS, **options}

    def producer(self, **options: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(**self.producer_options(**options))

    def consumer(self, *topics: str, **options: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(*topics, **self.options(), **options)

    def admin(self, **options: Any) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(**self.options(), **options)

    def faust_credentials(self) -> CredentialsT | None:
        """Faust's ``broker_credentials``: its driver turns them into these same aiokafka options."""
        from faust.auth import SASLCredentials, SSLCredentials

        if self.sasl_mechanism is not None:
            return SASLCredentials(
                username=self.sasl_username, password=self.sasl_password, ssl_context=self.ssl_context, mechanism=self.sasl_mechanism
            )
        if self.ssl_context is not None:
            return SSLCredentials(self.ssl_context)
        return None


def kafka_clients(settings: Settings) -> KafkaClients:
    """The process's clients for ``settings``, built (certificate files read) once per distinct settings.

    Raises KafkaConfigError naming every problem with the Kafka settings."""
    return _built(settings)


@functools.cache
def _built(settings: Settings) -> KafkaClients:
    problems = check(settings)
    if problems:
        raise KafkaConfigError("Kafka settings: " + "; ".join(problems))
    if settings.broker.startswith("tansu://"):
        contiguous_fetch.require()  # the embedded broker's tail can show a later batch before an earlier one
    protocol = settings.kafka_security_protocol.upper()
    sasl = protocol.startswith("SASL_")
    return KafkaClients(
        bootstrap=settings.bootstrap,
        security_protocol=protocol,
        sasl_mechanism=settings.kafka_sasl_mechanism.upper() if sasl else None,
        sasl_username=settings.kafka_sasl_username if sasl else None,
        sasl_password=_password(settings) if sasl else None,
        ssl_context=_ssl_context(settings) if protocol.endswith("SSL") else None,
    )


def check(settings: Settings) -> list[str]:
    """Every problem with the Kafka settings (clients, topics, processing guarantee), each naming its setting."""
    problems = []
    protocol = settings.kafka_security_protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        problems.append(f"kafka_security_protocol {settings.kafka_security_protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    sasl_given = [
        name
        for name in ("kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password", "kafka_sasl_password_file")
        if getattr(settings, name)
    ]
    if protocol.startswith("SASL_"):
        mechanism = settings.kafka_sasl_mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            choices = ", ".join(SASL_MECHANISMS)
            problems.append(f"kafka_sasl_mechanism {settings.kafka_sasl_mechanism!r} is not one of {choices} (needed with {protocol})")
        if not settings.kafka_sasl_username:
            problems.append(f"kafka_sasl_username is needed with {protocol}")
        if settings.kafka_sasl_password and settings.kafka_sasl_password_file:
            problems.append("give kafka_sasl_password or kafka_sasl_password_file, not both")
        elif not settings.kafka_sasl_password and not settings.kafka_sasl_password_file:
            problems.append(f"a password is needed with {protocol}: FLOTILLA_KAFKA_SASL_PASSWORD or kafka_sasl_password_file")
        elif settings.kafka_sasl_password_file:
            problems += _unreadable("kafka_sasl_password_file", settings.kafka_sasl_password_file)
    elif sasl_given and protocol in SECURITY_PROTOCOLS:
        problems.append(f"{', '.join(sasl_given)} apply only with kafka_security_protocol SASL_PLAINTEXT or SASL_SSL, not {protocol}")
    ssl_given = [
        name
        for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile", "kafka_ssl_key_password")
        if getattr(settings, name)
    ]
    if protocol.endswith("SSL"):
        if bool(settings.kafka_ssl_certfile) != bool(settings.kafka_ssl_keyfile):
            problems.append("kafka_ssl_certfile and kafka_ssl_keyfile go together (the client's certificate and its key)")
        for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"):
            if getattr(settings, name):
                problems += _unreadable(name, getattr(settings, name))
    elif ssl_given and protocol in SECURITY_PROTOCOLS:
        problems.append(f"{', '.join(ssl_given)} apply only with kafka_security_protocol SSL or SASL_SSL, not {protocol}")
    if settings.processing_guarantee not in PROCESSING_GUARANTEES:
        problems.append(f"processing_guarantee {settings.processing_guarantee!r} is not one of {', '.join(PROCESSING_GUARANTEES)}")
    elif settings.processing_guarantee == "exactly_once" and settings.broker.startswith("tansu://"):
        problems.append(
            "processing_guarantee exactly_once needs Kafka transactions, which the embedded broker (tansu://) does not have:"
            " use at_least_once with it, or a kafka:// broker with transactions (Apache Kafka, Redpanda, MSK)"
        )
    if settings.replication_factor < 1:
        problems.append(f"replication_factor must be at least 1, got {settings.replication_factor}")
    elif not 1 <= settings.min_insync_replicas <= settings.replication_factor:
        factor, insync = settings.replication_factor, settings.min_insync_replicas
        problems.append(f"min_insync_replicas must be between 1 and replication_factor ({factor}), got {insync}")
    if settings.events_retention_ms != -1 and settings.events_retention_ms <= 0:
        problems.append(
            f"events_retention_ms must be -1 (for ever) or a positive number of milliseconds, got {settings.events_retention_ms}"
        )
    return problems


def _unreadable(name: str, path: str) -> list[str]:
    try:
        Path(path).read_bytes()
    except OSError as exc:
        return [f"{name} {path}: {exc.strerror or exc}"]
    return []


def _password(settings: Settings) -> str:
    if settings.kafka_sasl_password:
        return settings.kafka_sasl_password
    # A mounted Secret file ends with a newline more often than not; a password never does.
    return Path(settings.kafka_sasl_password_file).read_text().rstrip("\r\n")


def _ssl_context(settings: Settings) -> ssl.SSLContext:
    """Server certificates checked against the CA bundle (or the system's), TLS 1.2 at least."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.kafka_ssl_cafile or None)
    except (ssl.SSLError, OSError) as exc:
        raise KafkaConfigError(f"Kafka settings: kafka_ssl_cafile {settings.kafka_ssl_cafile}: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.kafka_ssl_check_hostname
    if settings.kafka_ssl_certfile:
        try:
            context.load_cert_chain(
                settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile, password=settings.kafka_ssl_key_password or None
            )
        except (ssl.SSLError, OSError) as exc:
            files = f"kafka_ssl_certfile {settings.kafka_ssl_certfile} with kafka_ssl_keyfile {settings.kafka_ssl_keyfile}"
            raise KafkaConfigError(f"Kafka settings: {files}: {exc}") from exc
    return context
