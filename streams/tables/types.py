"""The UTF-8 text codec and the table key type that selects it.

Faust derives a table's serializers from its key/value types (anything but `bytes` defaults to
JSON); `TextKey` carries our codec's name so changelogs hold plain UTF-8 keys (job ids, client-id
keys) that any consumer can read.
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


class TextKey:
    """UTF-8 strings as table keys (and small text values)."""

    _options = SimpleNamespace(serializer=TEXT_CODEC)

    @classmethod
    def from_data(cls, data: Any, preferred_type: Any = None) -> Any:
        return data
