"""Writing a record made mostly of another record's fields by copying the bytes of those fields.

The ingest agent turns each valid job item (a ``JobItem`` read from its submit request) into the
payload of its ``JobSubmitted`` event: the same fields in another order, less the priority class
and three fields of the pod spec that validation fills in. A `Splicer` writes it from the item's
encoding (an `Encoded` with its fields' ``starts``) instead of writing every field anew: a field
whose value is the very object read from the source (and of the same type in both records) is
copied as the bytes it was read from; a record field whose value is an `Encoded` of its type is
copied whole, and one whose source value is such an `Encoded` is spliced from it the same way;
any other field is written by the compiled writer of its type. The bytes are those the compiled
writer gives for the same value (tests/schemas/test_splice.py compares them). Like
`schemas.compiled`, a splicer is compiled once into straight-line Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.compiled import Encoded, compile_schema


def _shape(schema: Any) -> Any:
    """A field type in a form that compares equal for equal types: named types by their name."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return tuple(_shape(branch) for branch in schema)
    if "name" in schema and schema["type"] in ("record", "error", "enum", "fixed"):
        return schema["name"]
    if schema["type"] == "array":
        return ("array", _shape(schema["items"]))
    if schema["type"] == "map":
        return ("map", _shape(schema["values"]))
    return schema["type"] if len(schema) == 1 else repr(sorted(schema.items()))


class _Source:
    """The Python source of a splicer: one function per (target, source) pair of record types."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.functions: list[str] = []
        self.names: dict[tuple[str, str], str] = {}
        self.constants: dict[str, Any] = {"_Encoded": Encoded}

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def function(self, target: dict[str, Any], source: dict[str, Any], starts: bool = False) -> str:
        """The function ``f(out, value, source)`` writing ``value`` as ``target`` from ``source``, an
        `Encoded` of type ``source``; with ``starts``, it returns where each field begins."""
        key = (target["name"], source["name"])
        if key in self.names:
            return self.names[key]
        function = self.names[key] = f"_s{len(self.names)}"
        fields = {field["name"]: (number, field) for number, field in enumerate(source["fields"])}
        last = len(source["fields"]) - 1
        lines = [f"def {function}(o, v, s):", "    e = s.encoding", "    t = s.starts"]
        if starts:
            lines.append("    b = len(o)")
        for number, field in enumerate(target["fields"]):
            name, value = repr(field["name"]), f"x{number}"
            if starts:
                lines.append(f"    a{number} = len(o) - b")
            lines.append(f"    {value} = v[{name}]")
            kind = _shape(field["type"])
            found = fields.get(field["name"])
            indent = "    "
            if found is not None and _shape(found[1]["type"]) == kind:
                end = f"t[{found[0] + 1}]" if found[0] < last else "len(e)"
                lines += [f"    if {value} is s[{name}]:", f"        o += e[t[{found[0]}]:{end}]", "    else:"]
                indent = "        "
            record = self.named.get(kind) if isinstance(kind, str) else None
            if record is not None and record["type"] in ("record", "error"):
                identity = self.constant(record)
                inner = self.function(record, record)
                lines += [
                    f"{indent}if type({value}) is _Encoded and {value}.schema is {identity}:",
                    f"{indent}    o += {value}.encoding",
                    f"{indent}elif type(s.get({name})) is _Encoded and s[{name}].schema is {identity}:",
                    f"{indent}    {inner}(o, {value}, s[{name}])",
                    f"{indent}else:",
                ]
                indent += "    "
            writer = self.constant(compile_schema(field["type"], named=self.named).write)
            lines.append(f"{indent}{writer}(o, {value})")
        if starts:
            lines.append(f"    return ({''.join(f'a{number}, ' for number in range(len(target['fields'])))})")
        self.functions.append("\n".join(lines))
        return function


class Splicer:
    """Writes records of type ``target`` from records of type ``source`` read as `Encoded` (both
    parsed record definitions; ``named``: the named types they refer to). Compiled once into Python,
    as `schemas.compiled` compiles its readers and writers."""

    def __init__(self, target: dict[str, Any], source: dict[str, Any], named: Mapping[str, Any]) -> None:
        self.target = target
        self.source = source
        code = _Source(named)
        entry = code.function(target, source, starts=True)
        namespace = dict(code.constants)
        exec("\n\n".join(code.functions), namespace)  # the source generated above from parsed schemas
        self._splice = namespace[entry]

    def encoded(self, value: Mapping[str, Any], source: Encoded) -> Encoded:
        """``value`` (every field of the target type present) as an `Encoded` of the target type, which a
        compiled writer of that type copies; written by copying what it shares with ``source``, an
        `Encoded` of the source type."""
        if source.schema is not self.source:
            raise ValueError(f"cannot splice from a {source.schema.get('name')} into a {self.target['name']}")
        out = bytearray()
        record = Encoded(value)
        record.starts = self._splice(out, value, source)
        record.encoding = bytes(out)
        record.schema = self.target
        return record
