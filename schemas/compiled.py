"""Avro binary readers and writers compiled from a schema into Python functions.

fastavro interprets the schema for every value it reads or writes: a job's spec of 181 bytes took
it about 37 us to read and 41 us to write, and the hot path reads or writes a spec several times
per job. Here a schema is turned once into straight-line Python (one function per record type,
every other type written out in place), which reads and writes the same spec several times faster.

They read exactly what fastavro's `schemaless_reader` gives for data written with the same schema
(multi-record union values as ``(full name, record)``, as the codec asks of fastavro; a union of
null and one record gives the record alone), and write exactly the bytes its `schemaless_writer`
writes for a valid record: one block per non-empty array or map, defaults for missing fields. A
record read as an `Encoded` is written back as the bytes it was read from (a splice). A reader may
also skip records of some types (read as None: the job-state fold has no use for a scheduling
cycle's decisions) and share records of others (each distinct encoding read once and the same
value given for every record with those bytes: the jobs of a submission share a few pod specs,
whose reading was most of the fold's decoding); values read shared must never be changed. A reader
may also read only some fields of some record types (a projection: the fields it skips are walked
over, not built), which gives a record of the kept type as a `Partial`. They
do not validate: as with ``encode(..., validate_record=False)``, a record of the wrong shape may fail
with any exception (the codec turns each into a `SchemaError`). A value for a union of several
records must be given as ``(full name, record)``. Schema resolution (data of an older writer
schema) stays fastavro's. tests/schemas/test_compiled.py compares both ways with fastavro.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Reader = Callable[[bytes, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]

_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
# What a reader reads of some record types: (full name, the fields it reads) pairs. It skips their other
# fields, and types not named are read whole.
Projection = frozenset[tuple[str, frozenset[str]]]


class Unsupported(ValueError):
    """A schema construct the compiler does not handle (the codec then keeps fastavro for it)."""


class Encoded(dict[str, Any]):
    """A record read together with its own encoding (``encoding``: the bytes it was read from, with
    ``schema``, the parsed record type that read them), so that whoever only needs to copy it (a job's
    spec, into its store and its lease command) does not write it again: a compiled writer of the same
    record type writes an Encoded as its encoding. So an Encoded is never changed in place (copy it
    into a plain dict to change it)."""

    __slots__ = ("encoding", "schema")
    encoding: bytes
    schema: dict[str, Any]


class Partial(Encoded):
    """A record of the kept type read with some of its fields only (a reader's projection, see
    `compile_schema`): what it lacks its encoding still holds, so it is written, as any Encoded, as that
    encoding, and whoever needs the whole record reads the encoding again."""

    __slots__ = ()


@dataclass(frozen=True)
class Compiled:
    """A schema's reader, ``read(data, position) -> (value, position after it)``, and writer, ``write(out, value)``."""

    read: Reader
    write: Writer


def _varint(data: bytes, position: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte (``first``, with its continuation bit set) was read."""
    value, shift = first & 0x7F, 7
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


# Varints written, by value: most are times (epoch ms), which the records of a batch share
# (a job's submission, its run's lease, start and end), and a lookup costs a quarter of the loop.
_VARINTS: dict[int, bytes] = {}
_VARINTS_MAX = 4_096


def _write_varint(out: bytearray, value: int) -> None:
    """A non-negative ``value`` of at least 128 as a varint."""
    found = _VARINTS.get(value)
    if found is None:
        if len(_VARINTS) >= _VARINTS_MAX:
            _VARINTS.clear()
        written, rest = bytearray(), value
        while rest >= 0x80:
            written.append((rest & 0x7F) | 0x80)
            rest >>= 7
        written.append(rest)
        found = _VARINTS[value] = bytes(written)
    out += found


_GLOBALS: dict[str, Any] = {
    "_varint": _varint,
    "_wvarint": _write_varint,
    "_double": struct.Struct("<d").unpack_from,
    "_float": struct.Struct("<f").unpack_from,
    "_pack_double": struct.Struct("<d").pack,
    "_pack_float": struct.Struct("<f").pack,
    "_Mapping": Mapping,
    "_Encoded": Encoded,
    "_Partial": Partial,
}


class _Source:
    """Python source being generated: lines, fresh local names, constants and per-record functions."""

    def __init__(
        self,
        named: Mapping[str, Any],
        keep: str | None = None,
        skip: frozenset[str] = frozenset(),
        shared: frozenset[str] = frozenset(),
        only: Projection = frozenset(),
    ) -> None:
        self.named = named
        self.keep = keep
        self.skip = skip
        self.shared = shared
        self.only = dict(only)
        self.functions: list[str] = []
        self.records: dict[str, str] = {}  # full name -> function name (reader or writer)
        self.skippers: dict[str, str] = {}  # full name -> the function moving past such a record
        self.sharers: dict[str, str] = {}  # full name -> the function reading such a record shared
        self.constants: dict[str, Any] = {}
        self._count = 0

    def local(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def constant(self, value: Any) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def identity(self, record: dict[str, Any]) -> str:
        """The constant naming a record type as an `Encoded` records it: the namespace's own
        definition, so that a record read within one schema is recognised by a writer of another."""
        return self.constant(self.named.get(record["name"], record))

    def resolve(self, schema: Any) -> Any:
        """A named type's definition; any other schema as it is."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            if schema not in self.named:
                raise Unsupported(f"unknown named type {schema!r}")
            return self.named[schema]
        if isinstance(schema, dict) and schema.get("type") in _PRIMITIVES and len(schema) == 1:
            return schema["type"]
        return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        raise Unsupported(f"nested type declaration {kind!r}")
    if "logicalType" in schema:
        raise Unsupported(f"logical type {schema['logicalType']!r}")
    return kind


def _record_branches(union: list[Any], source: _Source) -> list[str]:
    return [
        branch["name"] for branch in map(source.resolve, union) if isinstance(branch, dict) and branch.get("type") in ("record", "error")
    ]


# ------------------------------------------------------------------------------------------ readers


def _read_long(target: str, lines: list[str], indent: str) -> None:
    lines += [
        f"{indent}{target} = b[p]",
        f"{indent}p += 1",
        f"{indent}if {target} & 128:",
        f"{indent}    {target}, p = _varint(b, p, {target})",
        f"{indent}{target} = ({target} >> 1) ^ -({target} & 1)",
    ]


def _read(schema: Any, target: str, lines: list[str], indent: str, source: _Source, tagged: bool = False) -> None:
    """Lines reading a value of ``schema`` into local ``target``."""
    schema = source.resolve(schema)
    kind = _kind(schema)
    if kind == "null":
        lines.append(f"{indent}{target} = None")
    elif kind == "boolean":
        lines += [f"{indent}{target} = b[p] == 1", f"{indent}p += 1"]
    elif kind in ("int", "long"):
        _read_long(target, lines, indent)
    elif kind == "double":
        lines += [f"{indent}{target} = _double(b, p)[0]", f"{indent}p += 8"]
    elif kind == "float":
        lines += [f"{indent}{target} = _float(b, p)[0]", f"{indent}p += 4"]
    elif kind in ("string", "bytes"):
        size = source.local("n")
        _read_long(size, lines, indent)
        decoded = ".decode()" if kind == "string" else ""
        lines += [f"{indent}{target} = b[p:p + {size}]{decoded}", f"{indent}p += {size}"]
    elif kind == "enum":
        index = source.local("e")
        _read_long(index, lines, indent)
        lines.append(f"{indent}{target} = {source.constant(tuple(schema['symbols']))}[{index}]")
    elif kind == "fixed":
        lines += [f"{indent}{target} = b[p:p + {int(schema['size'])}]", f"{indent}p += {int(schema['size'])}"]
    elif kind in ("array", "map"):
        count, item, key = source.local("c"), source.local("i"), source.local("s")
        lines.append(f"{indent}{target} = {'[]' if kind == 'array' else '{}'}")
        lines.append(f"{indent}while True:")
        inner = indent + "    "
        _read_long(count, lines, inner)
        lines += [f"{inner}if not {count}:", f"{inner}    break", f"{inner}if {count} < 0:", f"{inner}    {count} = -{count}"]
        _read_long(source.local("z"), lines, inner + "    ")  # the block's size in bytes, not needed
        lines.append(f"{inner}for _ in range({count}):")
        body = inner + "    "
        if kind == "array":
            _read(schema["items"], item, lines, body, source)
            lines.append(f"{body}{target}.append({item})")
        else:
            _read("string", key, lines, body, source)
            _read(schema["values"], item, lines, body, source)
            lines.append(f"{body}{target}[{key}] = {item}")
    elif kind in ("record", "error") and schema["name"] in source.skip:
        lines += [f"{indent}p = {_record_skipper(schema, source)}(b, p)", f"{indent}{target} = None"]
        if tagged:
            lines.append(f"{indent}{target} = ({schema['name']!r}, None)")
    elif kind in ("record", "error"):
        function = _shared_reader(schema, source) if schema["name"] in source.shared else _record_reader(schema, source)
        lines.append(f"{indent}{target}, p = {function}(b, p)")
        if tagged:
            lines.append(f"{indent}{target} = ({schema['name']!r}, {target})")
    elif kind == "union":
        tag = len(_record_branches(schema, source)) > 1
        _union(schema, lines, indent, source, lambda branch, inner: _read(branch, target, lines, inner, source, tagged=tag))
    else:
        raise Unsupported(f"type {kind!r}")


def _union(schema: list[Any], lines: list[str], indent: str, source: _Source, branch_code: Callable[[Any, str], None]) -> None:
    """The code that reads a union's branch index and goes on with ``branch_code``'s lines for that branch
    (given the branch's schema and indent): the readers and the skippers dispatch alike."""
    index = source.local("u")
    _read_long(index, lines, indent)
    for number, branch in enumerate(schema):
        lines.append(f"{indent}{'if' if number == 0 else 'elif'} {index} == {number}:")
        branch_code(branch, indent + "    ")
    lines += [f"{indent}else:", f"{indent}    raise ValueError('union branch ' + str({index}) + ' out of range')"]


def _record_reader(schema: dict[str, Any], source: _Source) -> str:
    name = schema["name"]
    if name in source.records:
        return source.records[name]
    function = source.records[name] = f"_r{len(source.records)}"
    lines = [f"def {function}(b, p):"]
    values = []
    read = source.only.get(name)
    for number, field in enumerate(schema["fields"]):
        if read is not None and field["name"] not in read:
            _skip(field["type"], lines, "    ", source)
            continue
        target = f"f{number}"
        _read(field["type"], target, lines, "    ", source)
        values.append(f"{field['name']!r}: {target}")
    if name == source.keep:
        lines.insert(1, "    s = p")
        lines += [
            f"    r = {'_Partial' if read is not None else '_Encoded'}({{{', '.join(values)}}})",
            "    r.encoding = b[s:p]",
            f"    r.schema = {source.identity(schema)}",
            "    return r, p",
        ]
    else:
        lines.append(f"    return {{{', '.join(values)}}}, p")
    source.functions.append("\n".join(lines))
    return function


# The encodings a shared reader compares a record with: the last ones it read.
SHARED_RECENT = 8


def _shared_reader(schema: dict[str, Any], source: _Source) -> str:
    """A reader giving the same value for every record of ``schema``'s type with the same bytes as one
    of the last `SHARED_RECENT` it read: an encoding is self-delimiting, so bytes that start with a
    known record's encoding hold that record, and comparing them costs a fraction of reading it."""
    name = schema["name"]
    if name in source.sharers:
        return source.sharers[name]
    function = source.sharers[name] = f"_h{len(source.sharers)}"
    read, recent = _record_reader(schema, source), source.constant([])
    source.functions.append(
        "\n".join(
            [
                f"def {function}(b, p):",
                f"    for k, v in {recent}:",
                "        if b.startswith(k, p):",
                "            return v, p + len(k)",
                f"    v, e = {read}(b, p)",
                f"    {recent}.insert(0, (b[p:e], v))",
                f"    del {recent}[{SHARED_RECENT}:]",
                "    return v, e",
            ]
        )
    )
    return function


# ------------------------------------------------------------------------------------------ skippers


def _skip_long(lines: list[str], indent: str) -> None:
    lines += [f"{indent}while b[p] & 128:", f"{indent}    p += 1", f"{indent}p += 1"]


def _skip(schema: Any, lines: list[str], indent: str, source: _Source) -> None:
    """Lines moving ``p`` past a value of ``schema`` without building it (strings are not decoded)."""
    schema = source.resolve(schema)
    kind = _kind(schema)
    if kind == "null":
        lines.append(f"{indent}pass")
    elif kind == "boolean":
        lines.append(f"{indent}p += 1")
    elif kind in ("int", "long", "enum"):
        _skip_long(lines, indent)
    elif kind == "double":
        lines.append(f"{indent}p += 8")
    elif kind == "float":
        lines.append(f"{indent}p += 4")
    elif kind == "fixed":
        lines.append(f"{indent}p += {int(schema['size'])}")
    elif kind in ("string", "bytes"):
        size = source.local("n")
        _read_long(size, lines, indent)
        lines.append(f"{indent}p += {size}")
    elif kind in ("array", "map"):
        count, size = source.local("c"), source.local("z")
        lines.append(f"{indent}while True:")
        inner = indent + "    "
        _read_long(count, lines, inner)
        lines += [f"{inner}if not {count}:", f"{inner}    break", f"{inner}if {count} < 0:"]
        _read_long(size, lines, inner + "    ")  # a block with its size in bytes is jumped over whole
        lines += [f"{inner}    p += {size}", f"{inner}    continue", f"{inner}for _ in range({count}):"]
        if kind == "map":
            _skip("string", lines, inner + "    ", source)
        _skip(schema["items" if kind == "array" else "values"], lines, inner + "    ", source)
    elif kind in ("record", "error"):
        lines.append(f"{indent}p = {_record_skipper(schema, source)}(b, p)")
    elif kind == "union":
        _union(schema, lines, indent, source, lambda branch, inner: _skip(branch, lines, inner, source))
    else:
        raise Unsupported(f"type {kind!r}")


def _record_skipper(schema: dict[str, Any], source: _Source) -> str:
    name = schema["name"]
    if name in source.skippers:
        return source.skippers[name]
    function = source.skippers[name] = f"_s{len(source.skippers)}"
    lines = [f"def {function}(b, p):"]
    for field in schema["fields"]:
        _skip(field["type"], lines, "    ", source)
    lines.append("    return p")
    source.functions.append("\n".join(lines))
    return function


# ------------------------------------------------------------------------------------------ writers


def _write_long(value: str, lines: list[str], indent: str, source: _Source) -> None:
    number = source.local("n")
    lines += [
        f"{indent}{number} = ({value} << 1) ^ ({value} >> 63)",
        f"{indent}if {number} < 128:",
        f"{indent}    o.append({number})",
        f"{indent}else:",
        f"{indent}    _wvarint(o, {number})",
    ]


def _write_size(size: str, lines: list[str], indent: str, source: _Source) -> None:
    """A non-negative long (a length or count): its zig-zag form is twice it."""
    number = source.local("n")
    lines += [
        f"{indent}{number} = {size} << 1",
        f"{indent}if {number} < 128:",
        f"{indent}    o.append({number})",
        f"{indent}else:",
        f"{indent}    _wvarint(o, {number})",
    ]


def _write(schema: Any, value: str, lines: list[str], indent: str, source: _Source) -> None:
    """Lines writing local ``value`` as ``schema``."""
    schema = source.resolve(schema)
    kind = _kind(schema)
    if kind == "null":
        lines.append(f"{indent}if {value} is not None:")
        lines.append(f"{indent}    raise ValueError('not null: ' + repr({value})[:80])")
    elif kind == "boolean":
        lines.append(f"{indent}o.append(1 if {value} else 0)")
    elif kind in ("int", "long"):
        _write_long(value, lines, indent, source)
    elif kind == "double":
        lines.append(f"{indent}o += _pack_double({value})")
    elif kind == "float":
        lines.append(f"{indent}o += _pack_float({value})")
    elif kind in ("string", "bytes"):
        encoded = source.local("e")
        lines.append(f"{indent}{encoded} = {value}.encode()" if kind == "string" else f"{indent}{encoded} = bytes({value})")
        _write_size(f"len({encoded})", lines, indent, source)
        lines.append(f"{indent}o += {encoded}")
    elif kind == "enum":
        index = source.local("e")
        symbols = source.constant({symbol: number for number, symbol in enumerate(schema["symbols"])})
        lines.append(f"{indent}{index} = {symbols}[{value}]")
        _write_size(index, lines, indent, source)
    elif kind == "fixed":
        lines += [
            f"{indent}if len({value}) != {int(schema['size'])}:",
            f"{indent}    raise ValueError('fixed of {int(schema['size'])} bytes, not ' + str(len({value})))",
            f"{indent}o += {value}",
        ]
    elif kind in ("array", "map"):
        item, key = source.local("i"), source.local("s")
        lines.append(f"{indent}if {value}:")
        inner = indent + "    "
        _write_size(f"len({value})", lines, inner, source)
        if kind == "array":
            lines.append(f"{inner}for {item} in {value}:")
            _write(schema["items"], item, lines, inner + "    ", source)
        else:
            lines.append(f"{inner}for {key}, {item} in {value}.items():")
            _write("string", key, lines, inner + "    ", source)
            _write(schema["values"], item, lines, inner + "    ", source)
        lines.append(f"{indent}o.append(0)")
    elif kind in ("record", "error"):
        lines.append(f"{indent}{_record_writer(schema, source)}(o, {value})")
    elif kind == "union":
        _write_union(schema, value, lines, indent, source)
    else:
        raise Unsupported(f"type {kind!r}")


def _write_union(union: list[Any], value: str, lines: list[str], indent: str, source: _Source) -> None:
    """The branch is chosen as fastavro chooses it for a valid value: a ``(name, record)`` tuple by its
    name; otherwise the first branch the value's type fits (a bare mapping only where one branch is a
    record or map)."""
    branches = [source.resolve(branch) for branch in union]
    kinds = [_kind(branch) for branch in branches]
    records = {branch["name"]: number for number, branch in enumerate(branches) if _kind(branch) in ("record", "error")}
    if records:
        inner = source.local("t")
        lines.append(f"{indent}if type({value}) is tuple:")
        first = True
        for name, number in records.items():
            short = name.rsplit(".", 1)[-1]
            lines.append(f"{indent}    {'if' if first else 'elif'} {value}[0] in ({name!r}, {short!r}):")
            lines.append(f"{indent}        {inner} = {value}[1]")
            lines.append(f"{indent}        o.append({number << 1})")
            _write(branches[number], inner, lines, indent + "        ", source)
            first = False
        lines += [f"{indent}    else:", f"{indent}        raise ValueError('no union branch named ' + repr({value}[0]))"]
        keyword = "elif"
    else:
        keyword = "if"
    tests = {
        "null": "{v} is None",
        "boolean": "type({v}) is bool",
        "int": "isinstance({v}, int) and not isinstance({v}, bool)",
        "long": "isinstance({v}, int) and not isinstance({v}, bool)",
        "float": "isinstance({v}, (int, float)) and not isinstance({v}, bool)",
        "double": "isinstance({v}, (int, float)) and not isinstance({v}, bool)",
        "string": "isinstance({v}, str)",
        "bytes": "isinstance({v}, (bytes, bytearray))",
        "array": "isinstance({v}, (list, tuple))",
        "enum": "isinstance({v}, str)",
    }
    mappings = [number for number, kind in enumerate(kinds) if kind in ("record", "error", "map")]
    for number, (branch, kind) in enumerate(zip(branches, kinds, strict=True)):
        if kind in ("record", "error", "map"):
            if len(mappings) > 1:
                continue  # ambiguous without the tuple form
            test = f"isinstance({value}, _Mapping)"
        elif kind in tests:
            test = tests[kind].format(v=value)
        else:
            raise Unsupported(f"union branch of type {kind!r}")
        lines.append(f"{indent}{keyword} {test}:")
        lines.append(f"{indent}    o.append({number << 1})")
        if kind != "null":
            _write(branch, value, lines, indent + "    ", source)
        keyword = "elif"
    lines += [f"{indent}else:", f"{indent}    raise ValueError('no union branch for ' + repr({value})[:80])"]


def _record_writer(schema: dict[str, Any], source: _Source) -> str:
    name = schema["name"]
    if name in source.records:
        return source.records[name]
    function = source.records[name] = f"_w{len(source.records)}"
    lines = [
        f"def {function}(o, d):",
        f"    if (type(d) is _Encoded or type(d) is _Partial) and d.schema is {source.identity(schema)}:",
        "        o += d.encoding",
        "        return",
    ]
    for field in schema["fields"]:
        value = source.local("v")
        key = repr(field["name"])
        if "default" in field:
            lines.append(f"    {value} = d.get({key}, {source.constant(field['default'])})")
        elif _nullable(field["type"], source):
            lines.append(f"    {value} = d.get({key})")
        else:
            lines.append(f"    {value} = d[{key}]")
        if _kind(source.resolve(field["type"])) in ("float", "double"):
            lines.append(f"    {value} = float({value})")
        _write(field["type"], value, lines, "    ", source)
    source.functions.append("\n".join(lines))
    return function


def _nullable(schema: Any, source: _Source) -> bool:
    schema = source.resolve(schema)
    return schema == "null" or (isinstance(schema, list) and any(source.resolve(branch) == "null" for branch in schema))


# ------------------------------------------------------------------------------------------ compiling


def _build(
    kind: str,
    schema: Any,
    named: Mapping[str, Any],
    keep: str | None = None,
    skip: frozenset[str] = frozenset(),
    shared: frozenset[str] = frozenset(),
    only: Projection = frozenset(),
) -> Callable[..., Any]:
    source = _Source(named, keep, skip, shared, only)
    lines: list[str] = []
    if kind == "read":
        _read(schema, "value", lines, "    ", source)
        entry = "def _entry(b, p):\n" + "\n".join(lines) + "\n    return value, p"
    else:
        _write(schema, "value", lines, "    ", source)
        entry = "def _entry(o, value):\n" + "\n".join(lines)
    namespace = {**_GLOBALS, **source.constants}
    exec("\n\n".join([*source.functions, entry]), namespace)  # the source generated above from a parsed schema
    return namespace["_entry"]


def compile_schema(
    parsed: Any,
    keep: str | None = None,
    skip: frozenset[str] = frozenset(),
    shared: frozenset[str] = frozenset(),
    only: Projection = frozenset(),
) -> Compiled:
    """The reader and writer of ``parsed`` (fastavro's `parse_schema` form, its named types in
    ``__named_schemas``); the reader gives each record of type ``keep`` (a full name) as an `Encoded`,
    each record of a type in ``skip`` as None, and those of a type in ``shared`` read once per distinct
    encoding (see the module's docstring); of a record type ``only`` names, it reads the fields named
    there alone (a record of type ``keep`` is then a `Partial`). Raises `Unsupported` for constructs not
    handled (logical types...)."""
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    for name, fields in only:
        record = named.get(name)
        unknown = sorted(fields - {field["name"] for field in record["fields"]}) if isinstance(record, dict) else None
        if unknown != []:
            raise Unsupported(f"a projection of {name}: " + (f"no fields {unknown}" if unknown else "no such record type"))
    return Compiled(_build("read", parsed, named, keep, skip, shared, only), _build("write", parsed, named))
