"""Running the control plane: topics first, then the Faust worker (agents, tables, web server)."""

from __future__ import annotations

import asyncio
import logging

import faust

from streams.app import create_control_plane
from streams.config import Settings
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


def run_worker(settings: Settings) -> int:
    """Blocks until the worker is stopped (SIGINT/SIGTERM); returns its exit code."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(ensure_topics(settings))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    plane = create_control_plane(settings)
    worker = faust.Worker(plane.app, loglevel=settings.log_level, loop=loop, override_logging=True)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
