"""`flotilla up` and its log: one `up` per state directory, and the archive put back into the fresh broker.

The embedded broker starts empty every time; the log archive under ``<state-dir>/log`` is the log.
Before the worker starts, `restore_log` repairs the archive (a torn tail is cut, with a warning),
creates the topics and re-produces every archived record at its own offset, showing its progress;
the worker then refolds the log, and `Progress.from_health` (`streams.client.progress`) shows that too, from its /health answer.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from streams.archive.lock import DirLock
from streams.archive.restore import archived_count, restore
from streams.archive.writer import ArchiveWriter, seal_generation
from streams.client.progress import Progress
from streams.config import Settings
from streams.kafka import kafka_clients
from streams.topics import ensure_topics


def lock_state_dir(state: Path) -> DirLock:
    """Held for as long as `flotilla up` runs; Locked (naming the other's pid) when another one uses the directory."""
    return DirLock(state, "flotilla up").acquire()


def restore_log(settings: Settings) -> int:
    """Repair the archive, set its scheduler feed aside, create the topics, re-produce the archive into the broker;
    returns the records restored.

    Raises Locked, ArchiveCorrupt or RestoreError with the reason."""
    archive = Path(settings.archive_dir)
    writer = ArchiveWriter(archive, codec=settings.archive_codec)
    try:
        cuts = writer.open()
    finally:
        writer.close()
    for cut in cuts:
        print(f"warning: {cut}", file=sys.stderr, flush=True)
    # The scheduler starts a new feed in the empty broker: the one archived so far is kept apart, for replays.
    seal_generation(archive, settings.topic("scheduler-feed"))
    asyncio.run(ensure_topics(settings))
    total = archived_count(archive)
    if total == 0:
        return 0
    print(f"restoring the log from {archive} ({total:,} records) into the embedded broker", flush=True)
    line = Progress("restored", "records")
    line.first = (time.monotonic(), 0)
    result = asyncio.run(restore(archive, kafka_clients(settings), lambda p: line.show(p.done, p.total, p.finished)))
    return result.done
