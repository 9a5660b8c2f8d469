"""Running the control plane: who may call it, its topics, then the Faust worker (agents, tables, web server)."""

from __future__ import annotations

import asyncio
import logging
import sys

import faust

from schemas.codec import SchemaError
from streams.app import create_control_plane
from streams.archive.lock import Locked
from streams.archive.reader import ArchiveCorrupt
from streams.auth import AuthConfigError
from streams.auth.setup import describe_access
from streams.config import Settings
from streams.gc_tuning import tune_for_long_lived_state
from streams.kafka import KafkaConfigError, kafka_clients
from streams.logs import LOG_FORMATS, json_logging_config
from streams.plane import ControlPlane
from streams.scheduler.config_file import ConfigFileError
from streams.topics import ensure_topics, use_configured_framing

log = logging.getLogger(__name__)

# The scheduling cycle runs on a thread for up to a second at a time (streams/agents/scheduler.py).
# Meanwhile the event loop, after each socket call (which releases the GIL), waits for the GIL for
# up to the interpreter's switch interval, 5 ms by default: an API call paid that several times
# over. With 1 ms the loop takes its turn five times sooner, at a few microseconds per switch.
GIL_SWITCH_INTERVAL_S = 0.001

# A worker whose authentication settings or scheduler configuration are refused exits with this
# code, before it touches the broker; so does one whose schema registry is unreachable or refuses a schema.
CONFIG_ERROR = 2
# Bind addresses that are no address to call.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def run_worker(settings: Settings) -> int:
    """Blocks until the worker is stopped (SIGINT/SIGTERM); returns its exit code."""
    if settings.log_format not in LOG_FORMATS:
        print(f"error: log format {settings.log_format!r} is not one of {', '.join(LOG_FORMATS)}", file=sys.stderr, flush=True)
        return CONFIG_ERROR
    try:
        kafka = kafka_clients(settings)  # every Kafka setting checked, certificate files read, before anything starts
    except KafkaConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return CONFIG_ERROR
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        print(f"API access: {describe_access(settings)}", flush=True)
        print(f"Kafka: {settings.broker} ({kafka.describe()}; {settings.processing_guarantee})", flush=True)
        plane = create_control_plane(settings)  # reads the scheduler configuration, fetches the OIDC key set
    except (AuthConfigError, ConfigFileError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return CONFIG_ERROR
    print(plane.configuration.describe(settings.scheduler_config), flush=True)
    if settings.web_host in WILDCARDS and not settings.canonical_url:
        print(
            f"warning: the other workers will call this one at {settings.web_url}, which reaches it only from this host; "
            "set FLOTILLA_CANONICAL_URL (--canonical-url) to an address they can reach",
            file=sys.stderr,
            flush=True,
        )
    try:
        use_configured_framing(settings)
    except SchemaError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return CONFIG_ERROR
    try:
        open_archive(plane)
    except (Locked, ArchiveCorrupt, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return CONFIG_ERROR
    loop.run_until_complete(ensure_topics(settings))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logging_config = json_logging_config(settings.log_level) if settings.log_format == "json" else None
    worker = faust.Worker(plane.app, loglevel=settings.log_level, loop=loop, override_logging=True, logging_config=logging_config)
    tune_for_long_lived_state()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def open_archive(plane: ControlPlane) -> None:
    """Lock the log archive and cut a torn tail; after a restore, hold scheduling until the log is refolded (and fetch
    for the archive less often meanwhile: `Archiver.patient_while`)."""
    if plane.archiver is None:
        return
    for cut in plane.archiver.open():
        print(f"warning: {cut}", file=sys.stderr, flush=True)
    settings = plane.settings
    if settings.refold_before_scheduling:
        events = settings.topic("events")
        targets = {partition: offset for (topic, partition), offset in plane.archiver.durability.offsets().items() if topic == events}
        plane.refold.arm(targets)
        plane.archiver.patient_while(lambda: not plane.refold.caught_up)
