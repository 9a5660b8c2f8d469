"""One job set's event sequences, read from the start of the `events` topic with a group-less consumer.

Each event stream gets its own consumer: no group means no rebalance for other readers, no
committed offsets to clean up, and closing the stream is closing the consumer. It reads only the
partition the job set's key hashes to (Kafka's default partitioner, which every writer of
`events` must use: the fold keeps a job's state on that partition, schemas/README.md), so any
worker streams any job set, and a stream costs its partition, not the whole log.

"Caught up" is measured against the high watermark of the first fetch of each partition, not
ListOffsets: Tansu, the embedded broker, answers ListOffsets(latest) with the start of the last
record batch (see streams/transport.py), which would end a replay before its last events.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.codec import SchemaError, decode
from streams.api.errors import ApiError
from streams.config import Settings
from streams.domain.events import sequence_key
from streams.domain.partitioning import key_hash, partition_for
from streams.kafka import KafkaClients, kafka_clients

log = logging.getLogger(__name__)

# A submission of many jobs is one sequence of up to a few MiB; fetch at least one whole.
_MAX_PARTITION_FETCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class EventsTopic:
    """Where job-set readers find the `events` topic."""

    kafka: KafkaClients
    topic: str

    @classmethod
    def of(cls, settings: Settings) -> EventsTopic:
        return cls(kafka_clients(settings), settings.topic("events"))

    def job_set(self, queue: str, job_set_id: str) -> JobSetLog:
        return JobSetLog(self.kafka, self.topic, sequence_key(queue, job_set_id))


class JobSetLog:
    def __init__(self, kafka: KafkaClients, topic: str, key: str) -> None:
        self.topic = topic
        self.key = key.encode()
        self._consumer: AIOKafkaConsumer = kafka.consumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=_MAX_PARTITION_FETCH_BYTES,
        )
        self._partitions: list[TopicPartition] = []
        self._ends: dict[TopicPartition, int] = {}  # end of each partition when first fetched

    async def __aenter__(self) -> JobSetLog:
        await self._consumer.start()
        try:
            partitions = self._consumer.partitions_for_topic(self.topic)
            if not partitions:
                await self._consumer.topics()  # a metadata refresh: the topic may be newer than the client
                partitions = self._consumer.partitions_for_topic(self.topic)
            if not partitions:
                raise ApiError(503, f"topic {self.topic} does not exist on the broker")
            self._partitions = [TopicPartition(self.topic, partition_for(key_hash(self.key), len(partitions)))]
            self._consumer.assign(self._partitions)
            await self._consumer.seek_to_beginning(*self._partitions)
        except BaseException:
            await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._consumer.stop()

    async def read(self, timeout_ms: int) -> list[dict[str, Any]]:
        """The job set's next sequences (decoded), waiting up to ``timeout_ms`` when there are none yet.

        A message that does not decode is logged and skipped: one bad writer must not end every
        watcher's stream.
        """
        batches = await self._consumer.getmany(*self._partitions, timeout_ms=timeout_ms)
        sequences = []
        for tp in sorted(batches, key=lambda tp: tp.partition):
            for message in batches[tp]:
                if message.key != self.key:
                    continue
                try:
                    sequences.append(decode("event_sequence", message.value))
                except SchemaError as exc:
                    log.warning("skipping undecodable event message %s@%s: %s", tp, message.offset, exc)
        for tp in self._partitions:
            highwater = self._consumer.highwater(tp)
            if tp not in self._ends and highwater is not None:
                self._ends[tp] = highwater
        return sequences

    async def caught_up(self) -> bool:
        """Every partition read up to where it ended when this reader first fetched from it."""
        if len(self._ends) < len(self._partitions):
            return False
        for tp, end in self._ends.items():
            if await self._consumer.position(tp) < end:
                return False
        return True
