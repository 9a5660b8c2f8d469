"""The `client-ids` table: "queue/client id" -> job id, the submission de-duplication index.

Submissions are keyed by queue, so one worker sees every client id of a queue.
"""

from __future__ import annotations

import faust
from faust.types import TableT

from streams.config import Settings
from streams.tables.store import store_options
from streams.tables.types import TextKey


def client_id_key(queue: str, client_id: str) -> str:
    return f"{queue}/{client_id}"


def client_ids_table(app: faust.App, settings: Settings) -> TableT:
    return app.Table(
        "client-ids",
        key_type=TextKey,
        value_type=TextKey,
        partitions=settings.partitions,
        help="Job id of each (queue, client id) already submitted.",
        options=store_options(),
    )
