"""The log archive: the records of `events` (and `queues`) kept on disk, for a broker that keeps nothing.

The embedded broker holds its log in memory. On the embedded default Flotilla therefore keeps the
source of truth itself: every record of the archived topics goes to Avro object container files
under ``<state-dir>/log/`` (`segments`, `writer`), written in groups with one fsync each, and a
change is acknowledged to its caller once it is there (`durable`). `flotilla up` re-produces the
archive into the empty broker (`restore`) and the worker refolds every table from it before it
schedules again (`refold`). `reader` reads the archive back for `flotilla log verify|export`
and for any command that replays the log without a broker (`source`).

The format modules (`segments`, `files`, `writer`, `reader`, `source`, `lock`) import no broker
library; `archiver` (the worker's consumer) and `restore` are the only ones that talk to Kafka.
"""
