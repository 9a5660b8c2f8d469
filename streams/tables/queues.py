"""The `queues` global table: every worker holds every queue definition.

The queue agent writes it from the compacted `queues` topic; Faust replicates it to every worker
through the table's changelog. (Using the `queues` topic itself as the changelog would save a hop,
but faust-streaming 0.15.3's partition assignor stalls on a global table whose changelog topic is
not named `<app>-<table>-changelog`.)
"""

from __future__ import annotations

import faust

from streams.tables.types import TextKey, avro_value


def queues_table(app: faust.App) -> faust.GlobalTable:
    return app.GlobalTable(
        "queues",
        key_type=TextKey,
        value_type=avro_value("queue"),
        partitions=1,
        help="Queue definitions by name.",
    )
