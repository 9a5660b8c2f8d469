"""Topics of their own for tests that drive the broker's clients directly."""

from __future__ import annotations

import uuid

from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from streams.kafka import KafkaClients


async def fresh_partition(kafka: KafkaClients, prefix: str) -> TopicPartition:
    """Partition 0 of a new one-partition topic named ``prefix`` and a random suffix (tests share a broker)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    return TopicPartition(topic, 0)
