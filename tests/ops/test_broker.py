"""The embedded broker starts on a free port, answers Kafka metadata requests, and stops."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ops.broker import BrokerError, EmbeddedBroker


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _create_and_describe(bootstrap: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("probe", 3, 1)])
        [described] = await admin.describe_topics(["probe"])
        return len(described["partitions"])
    finally:
        await admin.close()


def test_broker_serves_kafka_and_stops(tmp_path) -> None:
    with EmbeddedBroker(log_path=tmp_path / "broker.log") as broker:
        assert broker.running and broker.port
        assert _listening(broker.port)
        assert asyncio.run(_create_and_describe(broker.bootstrap)) == 3
        port = broker.port
    assert not broker.running
    assert not _listening(port)
    assert "listening on" in (tmp_path / "broker.log").read_text()


def test_starting_twice_is_refused() -> None:
    with EmbeddedBroker() as broker:
        with pytest.raises(BrokerError, match="already started"):
            broker.start()
