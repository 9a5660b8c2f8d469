"""A Faust transport for Tansu, the embedded broker: `tansu://host:port`.

Tansu 0.6 answers ListOffsets(latest) with the base offset of the partition's last record batch
plus one, not the log end offset. Faust takes that answer as the high watermark when it recovers a
table from its changelog and stops there, so the records of the last changelog batch (the latest
states of the jobs written last) would silently not be restored. This transport corrects the
answer by reading the partition's tail from the reported offset. Real Kafka needs none of this:
production brokers use `kafka://`. It also shortens the fetch wait while records keep coming (see
`BusyFetcher`), and reads every partition without holes (streams/contiguous_fetch.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams import contiguous_fetch

_TAIL_READ_TIMEOUT_S = 10.0
# Tansu holds a fetch until its wait runs out even when records arrive meanwhile, so Faust's fixed
# 1.5 s wait became the latency of every hop (submission -> event -> feed -> tick -> lease).
_FETCH_MAX_WAIT_MS = 100
_FETCH_BUSY_WAIT_MS = 20


async def exact_end_offsets(client_options: Mapping[str, Any], reported: Mapping[TP, int]) -> dict[TP, int]:
    """The true end offset of each partition, given an answer that may stop at its last batch.

    A Fetch response carries the partition's high watermark, which Tansu does report correctly,
    so one fetch at the last reported record is enough. ``client_options``: the bootstrap servers
    and security of the worker's own consumer.
    """
    exact = dict(reported)
    tails = {TopicPartition(tp.topic, tp.partition): tp for tp, offset in reported.items() if offset > 0}
    if not tails:
        return exact
    reader = AIOKafkaConsumer(**client_options, enable_auto_commit=False)
    await reader.start()
    try:
        reader.assign(list(tails))
        for partition, tp in tails.items():
            reader.seek(partition, reported[tp] - 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _TAIL_READ_TIMEOUT_S
        while any(reader.highwater(p) is None for p in tails):
            if loop.time() > deadline:
                raise TimeoutError(f"no fetch answer for {sorted(map(str, tails))} within {_TAIL_READ_TIMEOUT_S}s")
            await reader.getmany(*tails, timeout_ms=200)
        for partition, tp in tails.items():
            exact[tp] = max(reported[tp], reader.highwater(partition))
        return exact
    finally:
        await reader.stop()


class BusyFetcher(Fetcher):
    """aiokafka's fetcher, asking Tansu to wait as long as it has been since a fetch last brought records,
    between `_FETCH_BUSY_WAIT_MS` and `_FETCH_MAX_WAIT_MS`.

    Each hop of a job (submission -> event -> feed -> tick -> lease) is a record this worker's consumer
    fetches, and a record that arrives during a fetch waits out that fetch's wait. While records keep
    coming the next one is likely on its way, so the wait is short; once the partitions fall quiet it
    grows back, so an idle worker asks the broker no more often than with the long wait alone (each
    fetch costs the worker and the broker CPU whether or not it brings anything)."""

    _records_at = -float("inf")

    def _get_actions_per_node(self, assignment: Any) -> Any:
        quiet_ms = 1000 * (time.monotonic() - self._records_at)
        self._fetch_max_wait_ms = int(min(max(quiet_ms, _FETCH_BUSY_WAIT_MS), _FETCH_MAX_WAIT_MS))
        return super()._get_actions_per_node(assignment)

    async def _proc_fetch_request(self, assignment: Any, node_id: int, request: Any) -> bool:
        brought = bool(await super()._proc_fetch_request(assignment, node_id, request))
        if brought:
            self._records_at = time.monotonic()
        return brought


def fetch_busy(consumer: AIOKafkaConsumer) -> None:
    """Make a started consumer's fetcher a `BusyFetcher`: aiokafka builds it in start() and takes no other class."""
    consumer._fetcher.__class__ = BusyFetcher


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: faust_aiokafka.Transport) -> AIOKafkaConsumer:
        contiguous_fetch.require()  # Faust would otherwise commit past a batch Tansu showed late
        consumer = super()._create_worker_consumer(transport)
        # Faust passes no setting for it; the consumer hands it to its fetcher when it starts.
        consumer._fetch_max_wait_ms = _FETCH_MAX_WAIT_MS
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        fetch_busy(self._ensure_consumer())

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        reported = await super()._highwaters(partitions)
        conf = self.app.conf
        # The options Faust gave its own consumer: the credentials come from streams/kafka.py.
        options = {
            "bootstrap_servers": self._ensure_consumer()._client._bootstrap_servers,
            **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
        }
        return await exact_end_offsets(options, reported)


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
