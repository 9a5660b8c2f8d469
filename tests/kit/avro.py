"""Records read back by fastavro's own readers, which type what they read as any Avro value."""

from __future__ import annotations

from typing import Any

from fastavro.types import AvroMessage


def as_record(message: AvroMessage) -> dict[str, Any]:
    """``message``, read with a record schema: a dict."""
    assert isinstance(message, dict), f"a record schema reads as a dict, not {type(message).__name__}"
    return message
