"""Key and value types that tell Faust tables which codec to use, and the text codec.

Faust derives a table's serializers from its key/value types (anything but `bytes` defaults to
JSON); these types carry our codec names so table changelogs hold plain UTF-8 keys and Avro values,
readable by any consumer that has the schemas.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.serializers import codecs

TEXT_CODEC = "flotilla.text"


class TextCodec(codecs.Codec):
    """UTF-8 strings, for keys (job ids, queue names) and small text values."""

    def _dumps(self, obj: Any) -> bytes:
        return obj.encode() if isinstance(obj, str) else bytes(obj)

    def _loads(self, s: bytes) -> Any:
        return bytes(s).decode()


def register_text_codec() -> None:
    if not isinstance(codecs.codecs.get(TEXT_CODEC), TextCodec):
        codecs.register(TEXT_CODEC, TextCodec())


class _SerializerType:
    _options: SimpleNamespace

    @classmethod
    def from_data(cls, data: Any, preferred_type: Any = None) -> Any:
        return data


class TextKey(_SerializerType):
    """UTF-8 string keys."""

    _options = SimpleNamespace(serializer=TEXT_CODEC)


def avro_value(schema: str) -> type:
    """A value type that (de)serializes plain dicts with the named Avro schema."""
    return type(f"Avro_{schema}", (_SerializerType,), {"_options": SimpleNamespace(serializer=f"flotilla.{schema}")})
