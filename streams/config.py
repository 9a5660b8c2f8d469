"""Control-plane settings: one frozen dataclass, filled from defaults, a settings file, `FLOTILLA_*` variables and flags.

Defaults are the embedded single-machine set-up (Tansu on 127.0.0.1:9092, REST on 127.0.0.1:8080);
production overrides the broker URL, partitions, replication and the Kafka clients' security
(streams/kafka.py checks those and builds every client from them). The settings file
(``--settings FILE`` or FLOTILLA_SETTINGS_FILE) is a YAML mapping of these field names, so a
Kubernetes ConfigMap can hold what is not secret while passwords come from variables.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

# Largest record any Flotilla client produces or fetches: an executor's report and the node state
# forwarded from it list every run the executor holds (about 60 bytes each), beyond Kafka's 1 MB
# default from about 16k runs.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024

# The values the Kafka settings below may take (checked in streams/kafka.py, offered by the CLI's flags).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROCESSING_GUARANTEES = ("at_least_once", "exactly_once")


@dataclass(frozen=True)
class Settings:
    # tansu:// is the embedded broker (see streams/transport.py); kafka:// any Kafka-compatible cluster.
    broker: str = "tansu://127.0.0.1:9092"
    app_id: str = "flotilla"
    topic_prefix: str = "flotilla."
    partitions: int = 1
    replication_factor: int = 1
    # Topics are created with min.insync.replicas of this (at most replication_factor): with acks=all,
    # a write is acknowledged once this many replicas have it.
    min_insync_replicas: int = 1
    # retention.ms of `events`, the source of truth: -1 keeps it for ever (Kafka's default is 7 days).
    events_retention_ms: int = -1
    # at_least_once (idempotent handlers), or exactly_once: Faust's Kafka transactions, for brokers
    # that have them (not the embedded Tansu); see streams/kafka.py for what it covers.
    processing_guarantee: str = "at_least_once"
    # The Kafka clients' security, the same for every client (streams/kafka.py): PLAINTEXT, SSL,
    # SASL_PLAINTEXT or SASL_SSL; SASL with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = ""
    kafka_sasl_username: str = ""
    # The password: from FLOTILLA_KAFKA_SASL_PASSWORD (a Kubernetes Secret) or a file holding it.
    kafka_sasl_password: str = field(default="", repr=False)
    kafka_sasl_password_file: str = ""
    # TLS: the CA bundle (PEM; empty: the system's CAs), and for mutual TLS the client certificate and key.
    kafka_ssl_cafile: str = ""
    kafka_ssl_certfile: str = ""
    kafka_ssl_keyfile: str = ""
    kafka_ssl_key_password: str = field(default="", repr=False)
    # Off only for brokers whose certificates do not name the address clients use; the chain is checked either way.
    kafka_ssl_check_hostname: bool = True
    # A YAML file of these settings, read before FLOTILLA_* variables and flags (which win over it).
    settings_file: str = ""
    data_dir: Path = Path(".flotilla/data")
    store: str = "rocksdb://"
    web_host: str = "127.0.0.1"
    web_port: int = 8080
    # Armada's gRPC API (Submit, QueueService, Event, Jobs), on web_host.
    grpc_port: int = 50051
    # Where the other workers reach this one's web server (REST and the peer calls between workers):
    # http://<web_host>:<web_port> when empty. Set it when web_host is a wildcard such as 0.0.0.0,
    # e.g. to http://$(POD_IP):8080 in a Kubernetes StatefulSet.
    canonical_url: str = ""
    # A call answered by another worker (the owner of a job's partition, the scheduling worker)
    # is retried for this long while the group rebalances: a killed worker is noticed after the
    # session timeout, then its partitions move and their tables recover on their new owners.
    route_timeout_s: float = 30.0
    # Authentication: a YAML file mapping bearer tokens to {user, groups}, and/or OIDC JWTs checked
    # against a JWKS. With neither, callers are anonymous, which is allowed only on 127.0.0.1.
    auth_token_file: str = ""
    oidc_jwks_url: str = ""
    oidc_issuer: str = ""
    oidc_audience: str = ""
    # The JWT claims naming the user and listing their groups (Armada's username claim; Keycloak: preferred_username).
    oidc_username_claim: str = "sub"
    oidc_groups_claim: str = "groups"
    # Members of these groups (comma-separated) create, update and delete queues and act on any job.
    admin_groups: str = "admins"
    # Tuned for Tansu and faust-streaming 0.15.3: with Kafka's defaults the first group join
    # waits ~30 s and a rejoin after a crash stalls.
    session_timeout_s: float = 10.0
    rebalance_timeout_s: float = 10.0
    heartbeat_interval_s: float = 1.0
    # Static group membership (Kafka's group.instance.id): a worker restarted under the same id takes
    # its partitions back at once instead of waiting for the group to notice its earlier life is gone.
    group_instance_id: str = ""
    submit_timeout_s: float = 30.0
    # Scheduling: one cycle per window of this length (a tick on the scheduler feed ends it).
    schedule_period_s: float = 1.0
    # Close a window early when it brings new work and the last cycle left no job waiting, so an
    # idle cluster leases a new job at once; off, cycles run once per period only.
    early_ticks: bool = True
    # How often an executor reports its nodes and runs.
    executor_report_interval_s: float = 1.0
    # The scheduler configuration file (YAML, Armada's names; see streams/scheduler/config_file.py):
    # priority classes, fairness, rate and round limits, pools, timeouts, submission rules.
    # Empty: Armada's production defaults.
    scheduler_config: str = ""
    # Producer safety on the submissions topic (streams/domain/admission.py): jobs per second per queue
    # and per user, with bursts of this many jobs; a request over either is rejected whole on `rejected`
    # with the reason. A rate of 0 turns that limit off.
    submission_queue_rate: float = 1_000.0
    submission_queue_burst: int = 100_000
    submission_user_rate: float = 2_000.0
    submission_user_burst: int = 200_000
    # A submission message larger than this is rejected unread (its rejection keeps the first KiB);
    # gRPC's default largest message. 0: no limit but the broker's.
    max_submission_bytes: int = 4 * 1024 * 1024
    # A Schema-Registry-compatible service (http(s)://[user:secret@]host:port): with one, messages are
    # written in the Confluent wire format and the schemas registered there; without, in Avro's
    # single-object encoding. Readers take both either way (schemas/README.md).
    schema_registry_url: str = ""
    # The log archive (streams/archive): a directory the worker copies every record of `events` and
    # `queues` to, as Avro container files. `flotilla up` turns it on (<state-dir>/log): the embedded
    # broker keeps its log in memory, so there the archive is the log's durable copy and a change is
    # acknowledged once it is archived. On a replicated Kafka it is a long-term copy for audit.
    archive_dir: str = ""
    archive_codec: str = "deflate"
    # Set by `flotilla up` after it restored the archive into the empty broker: the worker refolds
    # the log and hears from the executors holding runs before it schedules (streams/archive/refold.py).
    refold_before_scheduling: bool = False
    log_level: str = "info"
    # text, or json: one JSON object a line with job, run, queue and executor fields where they apply.
    log_format: str = "text"
    # Where executors serve their HTTP API (run logs): "id=http://host:port,id=...".
    executor_urls: str = ""

    @property
    def acknowledge_when_archived(self) -> bool:
        """Whether a write is answered only once archived: with the embedded broker (tansu://), whose log is in memory."""
        return bool(self.archive_dir) and self.broker.startswith("tansu://")

    @property
    def web_url(self) -> str:
        """This worker's address as the others call it."""
        return (self.canonical_url or f"http://{self.web_host}:{self.web_port}").rstrip("/")

    @property
    def bootstrap(self) -> str:
        """host:port list for plain aiokafka clients (Faust wants the scheme://host:port URL)."""
        return ",".join(part.split("://", 1)[-1] for part in self.broker.split(";"))

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then the settings file, then FLOTILLA_<FIELD> variables, then explicit (non-None) overrides.

        The file is the ``settings_file`` override, else FLOTILLA_SETTINGS_FILE. Raises ValueError
        naming the variable or the file's key when a value is not of its setting's type."""
        environ = dict(os.environ if environ is None else environ)
        given = {k: v for k, v in overrides.items() if v is not None}
        values: dict[str, Any] = {}
        settings_file = given.get("settings_file") or environ.get("FLOTILLA_SETTINGS_FILE")
        if settings_file:
            values.update(read_settings_file(Path(settings_file)))
        for spec in fields(cls):
            raw = environ.get(f"FLOTILLA_{spec.name.upper()}")
            if raw is not None:
                try:
                    values[spec.name] = _coerce(spec.type, raw)
                except ValueError as exc:
                    raise ValueError(f"FLOTILLA_{spec.name.upper()}: {exc}") from exc
        values.update(given)
        return replace(cls(), **values)


def read_settings_file(path: Path) -> dict[str, Any]:
    """The settings a YAML file sets; unknown names are refused with the nearest known one."""
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"settings file {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"settings file {path} is not YAML: {exc}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"settings file {path} must be a mapping of setting names to values, not {type(loaded).__name__}")
    types = {spec.name: spec.type for spec in fields(Settings) if spec.name != "settings_file"}
    values: dict[str, Any] = {}
    problems = []
    for name, value in loaded.items():
        key = str(name)
        if key not in types:
            near = difflib.get_close_matches(key, list(types), n=1)
            problems.append(f"unknown setting {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
            continue
        try:
            values[key] = _coerce(types[key], value if isinstance(value, str) else _typed(types[key], value))
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
    if problems:
        raise ValueError(f"settings file {path}: " + "; ".join(problems))
    return values


def _typed(type_name: object, value: Any) -> str:
    """A YAML scalar as the text a variable would hold, once it is of the setting's type."""
    kind = str(type_name)
    expected: tuple[type, ...] = {"bool": (bool,), "int": (int,), "float": (int, float)}.get(kind, (str, int, float))
    if isinstance(value, bool) and kind != "bool" or not isinstance(value, expected):
        described = {"bool": "a boolean", "int": "an integer", "float": "a number"}.get(kind, "text")
        raise ValueError(f"{value!r} is not {described}")
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _coerce(type_name: object, raw: str) -> Any:
    kind = str(type_name)
    if kind == "bool":
        if raw.strip().lower() not in _BOOLEANS:
            raise ValueError(f"{raw!r} is not a boolean (true/false, yes/no, on/off, 1/0)")
        return _BOOLEANS[raw.strip().lower()]
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "Path":
        return Path(raw)
    return raw
