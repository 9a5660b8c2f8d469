"""Faust glue: one codec per Flotilla schema, so topics and tables can name their Avro record.

Usage: call ``register_codecs()`` before the app creates topics, then
``app.topic("flotilla.events", value_serializer="flotilla.event_sequence")``.
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs
from faust.types.codecs import CodecT

from schemas import codec

CODEC_PREFIX = "flotilla."


class AvroCodec(codecs.Codec):
    """Faust codec for one Flotilla schema (wire format in ``schemas.codec``).

    The schema name travels in ``kwargs`` because Faust rebuilds codecs through ``clone`` when
    they are chained with ``|``.
    """

    def __init__(self, schema_name: str, children: tuple[CodecT, ...] | None = None, **kwargs: Any) -> None:
        codec.schema(schema_name)  # fail at registration, not on the first message
        super().__init__(children=children, schema_name=schema_name, **kwargs)
        self.schema_name = schema_name

    def _dumps(self, obj: Any) -> bytes:
        return codec.encode(self.schema_name, obj)

    def _loads(self, s: bytes) -> Any:
        return codec.decode(self.schema_name, s)


def codec_name(schema_name: str) -> str:
    """The Faust serializer name of a schema, e.g. ``flotilla.job_state``."""
    return CODEC_PREFIX + schema_name


def register_codecs() -> None:
    """Register ``flotilla.<schema>`` codecs for every schema; safe to call more than once."""
    for name in codec.SCHEMA_NAMES:
        key = codec_name(name)
        existing = codecs.codecs.get(key)
        if not (isinstance(existing, AvroCodec) and existing.schema_name == name):
            codecs.register(key, AvroCodec(name))
