"""How large a value's compact JSON can be, given the size of its Avro encoding.

A pod spec is refused over a size limit measured on its JSON (Armada's `maxPodSpecSizeBytes`), and
writing a spec out as JSON to measure it cost more than validating the rest of it. An item read
from the log comes with its Avro encoding, and for every schema type the JSON of a value is at
most ``per_byte`` times its Avro size plus ``extra`` (`JsonSize.most`): each Avro value takes at
least a byte (a string its length and its bytes), while JSON spends a bounded number of bytes on
each (field names, quotes, escapes, punctuation). So a spec whose bound is under the limit is under
it, and only a large one needs measuring.

The bound, for the compact JSON (no spaces, `ensure_ascii=False`) of a value of the schema:
strings write at most 6 bytes per byte (an escaped control character), numbers at most 3 bytes per
Avro byte (a double's 8 bytes at most 24 characters; a float's 4, read as a double, 6), `false` 5
bytes for one, `null` 4 for a
union's index byte; a record adds its field names and punctuation once; an array or map adds its
items' constant part once per item, which is at most a fixed multiple of the item's own smallest
Avro size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_PRIMITIVE = {
    # kind: (JSON bytes per Avro byte, constant, smallest Avro size)
    "null": (0.0, 4.0, 0),
    "boolean": (5.0, 0.0, 1),
    "int": (3.0, 0.0, 1),
    "long": (3.0, 0.0, 1),
    "float": (6.0, 0.0, 4),
    "double": (3.0, 0.0, 8),
    "string": (6.0, 0.0, 1),
    "bytes": (6.0, 0.0, 1),
}


@dataclass(frozen=True)
class JsonSize:
    """JSON size <= ``per_byte`` x Avro size + ``extra``; ``smallest``: the fewest Avro bytes of a value."""

    per_byte: float
    extra: float
    smallest: int

    def most(self, avro_bytes: int) -> float:
        return self.per_byte * avro_bytes + self.extra


def json_size(schema: Any, named: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> JsonSize:
    """The bound for values of ``schema`` (fastavro's parsed form; ``named``: its named types)."""
    if isinstance(schema, str) and schema in named:
        if schema in seen:
            raise ValueError(f"recursive type {schema}: no bound")
        return json_size(named[schema], named, seen | {schema})
    if isinstance(schema, str):
        return JsonSize(*_PRIMITIVE[schema])
    if isinstance(schema, list):  # a union: an index byte, then the branch
        branches = [json_size(branch, named, seen) for branch in schema]
        # a branch of no Avro bytes (null) has its index byte: its JSON per byte; the others their own bound
        empty = [b.extra for b in branches if b.smallest == 0]
        sized = [b.extra for b in branches if b.smallest > 0]
        return JsonSize(max([b.per_byte for b in branches] + empty), max(sized, default=0.0), 1)
    kind = schema["type"]
    if isinstance(kind, (str, list)) and kind in _PRIMITIVE:
        return JsonSize(*_PRIMITIVE[kind])
    if kind == "enum":
        return JsonSize(2.0 + max(len(s) for s in schema["symbols"]), 0.0, 1)
    if kind == "fixed":
        return JsonSize(6.0, 2.0, int(schema["size"]))
    if kind in ("record", "error"):
        name = schema.get("name", "")
        fields = [(f["name"], json_size(f["type"], named, seen | {name})) for f in schema["fields"]]
        # {"name":value,...}: braces, then per field its quoted name, colon and comma
        return JsonSize(
            max((size.per_byte for _, size in fields), default=0.0),
            2.0 + sum(len(field.encode()) + 4 + size.extra for field, size in fields),
            sum(size.smallest for _, size in fields),
        )
    if kind == "array":
        item = json_size(schema["items"], named, seen)
        return JsonSize(item.per_byte + (item.extra + 1) / max(item.smallest, 1), 2.0, 1) if item.smallest else _unbounded(schema)
    if kind == "map":
        value = json_size(schema["values"], named, seen)
        # an entry: its key (a string: at most 6 bytes per byte, and a colon) and its value, and a comma
        return JsonSize(max(6.0, value.per_byte) + (value.extra + 2) / (1 + value.smallest), 2.0, 1)
    raise ValueError(f"no JSON size bound for type {kind!r}")


def _unbounded(schema: Any) -> JsonSize:
    raise ValueError(f"no JSON size bound for an array of values that may take no Avro bytes: {schema!r}")
