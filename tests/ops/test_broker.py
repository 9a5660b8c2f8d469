"""The embedded broker starts on a free port, answers Kafka metadata requests, and stops."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess

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


def test_starting_inside_an_event_loop_is_refused_before_any_broker_runs() -> None:
    broker = EmbeddedBroker()

    async def start_inside_a_loop() -> None:
        broker.start()

    with pytest.raises(BrokerError, match="outside one"):
        asyncio.run(start_inside_a_loop())
    assert not broker.running and not broker.port


def test_a_start_interrupted_while_waiting_leaves_no_broker_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the broker is not ready yet (simulated: the wait raises it once the process runs)."""
    spawned: list[int] = []

    def interrupted(bootstrap: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        assert process is not None and process.poll() is None
        spawned.append(process.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr("ops.broker.wait_until_ready", interrupted)
    broker = EmbeddedBroker()
    with pytest.raises(KeyboardInterrupt):
        broker.start()
    assert spawned and not broker.running
    with pytest.raises(ProcessLookupError):
        os.kill(spawned[0], 0)
