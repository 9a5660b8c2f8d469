"""Standby copies of the tables, kept current in batches, so that a worker taking a partition over replays only its tail.

Faust keeps standby replicas itself (`table_standby_replicas`), but it applies each changelog record
through its per-message consumer path: measured with two workers and one partition
(bench/ingest.py, py-spy), the worker holding nothing but the standby copies spent more CPU per
job (20.5 s for 20,000 jobs) than the one doing all the work (15.0 s), so two workers cost twice
one worker's CPU per job. Flotilla turns Faust's standbys off and follows the changelogs itself,
the way its agents write them: `getmany` batches from a group-less consumer, one RocksDB
`WriteBatch` per partition, the table's persisted offset moved to the last record applied. The
consumer takes the broker's record batches whole (streams/fetched_batches.py): each record's key and
value go from the fetched batch into the `WriteBatch` with no `ConsumerRecord` made for it, since with two
workers every table write of one is copied by the other, once per job. When a
partition becomes active here, Faust's recovery starts from that offset: a tail replay.

Which worker keeps a partition's copy: the member after its owner, in address order, from the
assignment every member is handed, so every partition has one copy besides its owner's as soon as
there are two workers, and no coordination is needed. Following stops when a rebalance starts
(nothing is written into a partition that may become active here) and resumes for the new
assignment's copies once it is known.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.types import TP, TableT
from mode import Service

from streams.config import MAX_MESSAGE_BYTES
from streams.fetched_batches import BATCHES, install
from streams.kafka import KafkaClients
from streams.tables.batched import is_rocksdb, write_fetched

log = logging.getLogger(__name__)

# How long one fetch waits when nothing is new, and the most record batches applied at once.
FETCH_WAIT_MS = 200
MAX_BATCHES = 1_000
# The pause after applying a fetch: aiokafka fetches a partition again only once its last answer was
# taken, so what is written meanwhile comes in one fetch and one `WriteBatch` per partition. A copy is
# read only when its partition is taken over (then its tail is replayed), so it may lag this much.
GATHER_S = 0.2


def standby_partitions(distribution: Mapping[str, Mapping[str, Collection[int]]], topic: str, me: str) -> set[int]:
    """The partitions of ``topic`` whose copy ``me`` keeps: those whose owner comes just before it in address order."""
    members = sorted(distribution)
    if len(members) < 2 or me not in members:
        return set()
    before = members[members.index(me) - 1]
    return set(distribution[before].get(topic, ()))


def store_of(table: TableT) -> Any:
    """The table's Faust RocksDB store (typed as a mapping in Faust's interface)."""
    return table.data


class Standbys(Service):
    def __init__(self, app: Any, tables: list[TableT], kafka: KafkaClients, me: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.tables = {table.changelog_topic.get_topic_name(): table for table in tables if is_rocksdb(table.data)}
        self.kafka = kafka
        self.me = me
        self._consumer: AIOKafkaConsumer | None = None
        self._following: dict[TopicPartition, TableT] = {}
        self._generation = 0  # moves at every change of what is followed: a fetch from before is dropped

    async def on_start(self) -> None:
        if not self.tables:
            return
        install()
        self._consumer = self.kafka.consumer(
            group_id=None,
            key_deserializer=BATCHES,  # the fetches' record batches, no `ConsumerRecord` per record
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        )
        await self._consumer.start()
        # Faust starts app services once the tables are recovered, after this worker's first
        # assignment: its signal came before there was a consumer, so that assignment is followed now
        # (without this the worker that joined last kept no copies until the next rebalance).
        if not self.app.rebalancing:
            await self.follow_assignment()

    async def on_stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    def following(self) -> list[TP]:
        return sorted(TP(tp.topic, tp.partition) for tp in self._following)

    async def stop_following(self, *args: Any, **kwargs: Any) -> None:
        """A rebalance starts: write nothing more, any partition may become active here (a signal receiver)."""
        self._generation += 1
        self._following = {}
        if self._consumer is not None:
            self._consumer.assign([])

    async def follow_assignment(self, *args: Any, **kwargs: Any) -> None:
        """The assignment is known: follow the changelog partitions whose copy this worker keeps, each
        from the offset after the last one its store holds (a signal receiver)."""
        await self.stop_following()
        generation = self._generation
        if self._consumer is None:
            return
        distribution = dict(self.app.assignor.changelog_distribution)
        following = {
            TopicPartition(topic, partition): table
            for topic, table in self.tables.items()
            for partition in sorted(standby_partitions({url.rstrip("/"): tps for url, tps in distribution.items()}, topic, self.me))
        }
        if not following:
            return
        self._consumer.assign(list(following))
        for tp, table in following.items():
            if generation != self._generation:
                return  # a rebalance started during the seeks: nothing is followed until it ends
            persisted = store_of(table).persisted_offset(TP(tp.topic, tp.partition))
            if persisted is None:
                await self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, persisted + 1)
        if generation != self._generation:
            return
        self._following = following
        log.info("keeping standby copies of %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in following))

    @Service.task
    async def _follow(self) -> None:
        while not self.should_stop:
            if not self._following or self._consumer is None:
                await self.sleep(FETCH_WAIT_MS / 1000)
                continue
            generation = self._generation
            fetched = await self._consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=MAX_BATCHES)
            if generation != self._generation:
                continue  # the assignment changed meanwhile: these may belong to a partition active here now
            for tp, batches in fetched.items():
                table = self._following.get(tp)
                if table is None or not batches:
                    continue
                write_fetched(store_of(table), tp.partition, batches)
            if fetched:
                await self.sleep(GATHER_S)
