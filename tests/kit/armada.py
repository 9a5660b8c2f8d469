"""Armada's event stream messages (`EventStreamMessage`) as tests read them: the event each one carries."""

from __future__ import annotations

from typing import Any

from armada_client.armada import event_pb2


def kind(message: event_pb2.EventStreamMessage) -> str:
    """The name of the event ``message`` carries (its ``events`` one-of), e.g. ``"leased"``."""
    name = message.message.WhichOneof("events")
    assert name is not None, "every message carries an event"
    return name


def inner(message: event_pb2.EventStreamMessage) -> Any:
    """The event ``message`` carries (e.g. a JobFailedEvent)."""
    return getattr(message.message, kind(message))
