"""The `scheduler-index` table: the scheduling agent's index, key by key (see streams.scheduler.index).

One partition, like the scheduler feed it is folded from, so the worker that owns the feed owns
the whole index and a worker taking over recovers it from the changelog before its first cycle.
"""

from __future__ import annotations

import faust
from faust.types import TableT

from streams.config import Settings
from streams.tables.store import store_options
from streams.tables.types import TEXT_CODEC, TextKey
from streams.topics import changelog_name

TABLE = "scheduler-index"


def scheduler_index_table(app: faust.App, settings: Settings) -> TableT:
    return app.Table(
        TABLE,
        key_type=TextKey,
        value_type=bytes,
        partitions=1,
        changelog_topic=app.topic(
            changelog_name(settings, TABLE),
            key_serializer=TEXT_CODEC,
            value_serializer="raw",
            partitions=1,
            compacting=True,
        ),
        help="The scheduler's index: unfinished jobs, executors and limiter state (JSON).",
        options=store_options(),
    )
