"""Binary Avro codec for Flotilla's public records, in the framings off-the-shelf Kafka clients read.

Writers frame every message one of two standard ways:

- Avro single-object encoding (the default, no service needed): ``C3 01``, the 8-byte
  CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form (little endian), then
  the Avro binary body;
- the Confluent wire format, once ``use_schema_registry`` registered the schemas with a
  Schema-Registry-compatible service: ``00``, the 4-byte big-endian schema id, then the body.

Readers accept both, and Flotilla's first framing (``F1``, a release byte, the body), so a log
written before the change stays readable. The writer schema is looked up by its fingerprint among
the current schemas and every frozen release (``frozen/*/``), or by id in the schema registry,
and resolved against the reader's (current) schema: a compatible schema change only needs its
frozen copy, never a version number.

Schemas are parsed once per process and cached; ``encode``/``decode`` sit on the hot path.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from fastavro import parse_schema, schemaless_reader
from fastavro.schema import UnknownType, fingerprint, to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

from schemas.compiled import Compiled, Projection, compile_schema
from schemas.compiled import Encoded as Encoded  # a decoded record with its encoding, see decode(keep=...)
from schemas.compiled import Partial as Partial  # one read with some of its fields, see decode(only=...)

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = 0x00
LEGACY_MAGIC = 0xF1
SCHEMA_NAMES: tuple[str, ...] = (
    "job_submitted",
    "submit_request",
    "event_sequence",
    "job_state",
    "queue",
    "executor_command",
    "executor_report",
    "rejection",
)

SCHEMA_DIR = Path(__file__).parent
FROZEN_DIR = SCHEMA_DIR / "frozen"

_FINGERPRINT_END = len(SINGLE_OBJECT_MAGIC) + 8
_CONFLUENT_END = 5
_LEGACY_END = 2
_PathStep = str  # a field name, or "[]" for array items / "{}" for map values


class SchemaError(ValueError):
    """A record or message that does not fit the Flotilla Avro contract."""


class UnknownSchemaId(SchemaError):
    """The schema registry has no schema of that id (so asking again will not help)."""


class SchemaSource(Protocol):
    """A Schema-Registry-compatible service (see ``schemas.schema_registry``)."""

    def register(self, subject: str, schema: str) -> int: ...

    def schema(self, schema_id: int) -> str: ...


@dataclass(frozen=True)
class Writer:
    """A schema some message may have been written with: its name, parsed form and fingerprint."""

    name: str
    parsed: dict
    fingerprint: bytes
    origin: str  # "current", "frozen/v1", "registry id 7": where it was found, for error messages


def parse_directory(directory: Path) -> dict[str, dict]:
    """Parse every ``.avsc`` in ``directory`` into one namespace of named types.

    Files reference named types defined in other files, so each file is parsed only once the
    files it depends on are; the order is discovered rather than listed so that a frozen release
    with a different set of files loads the same way.
    """
    pending = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.avsc"))}
    named: dict[str, Any] = {}
    parsed: dict[str, dict] = {}
    while pending:
        progressed = False
        for stem, raw in list(pending.items()):
            attempt = dict(named)  # a failed parse leaves partial definitions behind
            try:
                parsed[stem] = cast(dict, parse_schema(raw, attempt))  # every file holds one record schema
            except UnknownType:
                continue
            named = attempt
            del pending[stem]
            progressed = True
        if not progressed:
            raise SchemaError(f"{directory}: unresolvable named types in {sorted(pending)}")
    return parsed


def standalone(parsed: Any) -> Any:
    """``parsed`` as one self-contained schema: each named type it uses defined where a depth-first
    walk meets it first and named after that, as Java's ``Schema.toString`` writes it.

    This is the schema a non-Python reader or a schema registry sees, and the one fingerprinted.
    """
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    defined: set[str] = set()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            if node in named and node not in defined:
                return walk(named[node])
            return node
        if isinstance(node, list):
            return [walk(branch) for branch in node]
        copy = {key: value for key, value in node.items() if not key.startswith("__")}
        if "name" in node and node["type"] in ("record", "error", "enum", "fixed"):
            defined.add(node["name"])
        if node["type"] in ("record", "error"):
            copy["fields"] = [{**{k: v for k, v in f.items() if not k.startswith("__")}, "type": walk(f["type"])} for f in node["fields"]]
        elif node["type"] == "array":
            copy["items"] = walk(node["items"])
        elif node["type"] == "map":
            copy["values"] = walk(node["values"])
        return copy

    return walk(parsed)


def schema_fingerprint(parsed: Any) -> bytes:
    """The CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form, little endian (8 bytes),
    as Avro's single-object encoding writes it."""
    # fastavro gives the fingerprint as the hex of its little-endian bytes
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(standalone(parsed)), "CRC-64-AVRO"))


class Registry:
    """Current schemas plus the frozen releases, parsed lazily once each, and the framing writers use.

    Separate from the module-level functions so that tests can point one at a scratch copy of the
    schemas and exercise resolution between releases that do not exist yet.
    """

    def __init__(self, current_dir: Path, frozen_dir: Path) -> None:
        self.current_dir = current_dir
        self.frozen_dir = frozen_dir
        self._current: dict[str, dict] | None = None
        self._current_writers: dict[str, Writer] = {}
        self._by_fingerprint: dict[bytes, Writer] | None = None
        self._legacy: dict[tuple[str, int], Writer] = {}
        self._source: SchemaSource | None = None
        self._ids: dict[str, int] = {}
        self._by_id: dict[int, Writer] = {}
        self._unknown_ids: dict[int, UnknownSchemaId] = {}
        self._headers: dict[str, bytes] = {}
        self._union_paths: dict[str, tuple[tuple[_PathStep, ...], ...]] = {}
        self._taggers: dict[str, _Tagger] = {}
        self._compiled: dict[tuple[str, str | None, frozenset[str], frozenset[str], Projection], Compiled] = {}

    def schema(self, name: str) -> dict:
        """The current parsed schema of top-level record ``name``."""
        if name not in SCHEMA_NAMES:
            raise SchemaError(f"unknown schema {name!r} (known: {', '.join(SCHEMA_NAMES)})")
        if self._current is None:
            self._current = parse_directory(self.current_dir)
        return self._current[name]

    def current_writer(self, name: str) -> Writer:
        """The current schema ``name`` as writers use it (with its fingerprint)."""
        found = self._current_writers.get(name)
        if found is None:
            parsed = self.schema(name)
            found = self._current_writers[name] = Writer(name, parsed, schema_fingerprint(parsed), "current")
        return found

    def releases(self) -> tuple[str, ...]:
        """The frozen releases, ``frozen/v<N>/``, oldest first."""
        found = (re.fullmatch(r"v(\d+)", p.name) for p in self.frozen_dir.iterdir() if p.is_dir())
        return tuple(f"v{n}" for n in sorted(int(m.group(1)) for m in found if m))

    def writers(self) -> dict[bytes, Writer]:
        """Every schema a message may have been written with, by fingerprint: the current schemas,
        then each frozen release's (a schema unchanged since a release keeps its fingerprint)."""
        if self._by_fingerprint is None:
            found = {w.fingerprint: w for w in map(self.current_writer, SCHEMA_NAMES)}
            for release in reversed(self.releases()):
                for writer in self.release_writers(release):
                    found.setdefault(writer.fingerprint, writer)
            self._by_fingerprint = found
        return self._by_fingerprint

    def release_writers(self, release: str) -> list[Writer]:
        """The top-level schemas of frozen release ``release`` (``v1``, ...)."""
        parsed = parse_directory(self.frozen_dir / release)
        return [Writer(n, parsed[n], schema_fingerprint(parsed[n]), f"frozen/{release}") for n in SCHEMA_NAMES if n in parsed]

    def use_schema_registry(self, source: SchemaSource, subjects: Mapping[str, str]) -> dict[str, int]:
        """Register the current schema of each name under its subject and write the Confluent wire
        format from now on; Confluent-framed messages are read by asking ``source`` for unknown ids.
        Returns the ids. Raises ``SchemaError`` when the registry refuses a schema."""
        ids = {}
        for name, subject in subjects.items():
            writer = self.current_writer(name)
            ids[name] = source.register(subject, json.dumps(standalone(writer.parsed)))
            self._by_id[ids[name]] = writer
        self._source, self._ids, self._headers = source, ids, {}
        return ids

    def use_single_object(self) -> None:
        """Back to the default: single-object encoding, no schema registry."""
        self._source, self._ids, self._headers, self._by_id, self._unknown_ids = None, {}, {}, {}, {}

    def header(self, name: str) -> bytes:
        """The bytes that precede the Avro body of a ``name`` message written now."""
        found = self._headers.get(name)
        if found is None:
            schema_id = self._ids.get(name)
            if schema_id is None:
                found = SINGLE_OBJECT_MAGIC + self.current_writer(name).fingerprint
            else:
                found = bytes((CONFLUENT_MAGIC,)) + schema_id.to_bytes(4, "big")
            self._headers[name] = found
        return found

    def framed(self, name: str, body: bytes) -> bytes:
        """A ``name`` message whose Avro body, written with the current schema, is ``body``."""
        return self.header(name) + body

    def writer_of(self, name: str, data: bytes | bytearray | memoryview) -> tuple[Writer, int]:
        """The schema that wrote ``data`` (a ``name`` message) and where its Avro body starts."""
        if len(data) < _LEGACY_END:
            raise SchemaError(f"cannot decode {name}: truncated message of {len(data)} byte(s), no header")
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < _FINGERPRINT_END:
                raise SchemaError(f"cannot decode {name}: truncated message of {len(data)} byte(s), no full fingerprint")
            key = bytes(data[2:_FINGERPRINT_END])
            writer = (self._by_fingerprint or self.writers()).get(key)
            if writer is None:
                raise SchemaError(
                    f"cannot decode {name}: unknown writer schema, fingerprint {key.hex()} (not a current or frozen Flotilla schema: "
                    "written by a newer release, or by a producer with a schema of its own, which needs the schema registry framing)"
                )
            start = _FINGERPRINT_END
        elif data[0] == CONFLUENT_MAGIC:
            if len(data) < _CONFLUENT_END:
                raise SchemaError(f"cannot decode {name}: truncated message of {len(data)} byte(s), no full schema id")
            writer, start = self._registered(name, int.from_bytes(data[1:_CONFLUENT_END], "big")), _CONFLUENT_END
        elif data[0] == LEGACY_MAGIC:
            writer, start = self._legacy_writer(name, data[1]), _LEGACY_END
        else:
            raise SchemaError(
                f"cannot decode {name}: unknown framing, first byte 0x{data[0]:02x} (expected c3 01 for Avro single-object "
                "encoding, 00 for the Confluent wire format or f1 for Flotilla's first framing); not a Flotilla Avro message"
            )
        if writer.name != name:
            raise SchemaError(f"cannot decode {name}: the message holds schema {writer.name} ({writer.origin}), not {name}")
        return writer, start

    def _registered(self, name: str, schema_id: int) -> Writer:
        found = self._by_id.get(schema_id)
        if found is not None:
            return found
        if schema_id in self._unknown_ids:
            raise self._unknown_ids[schema_id]
        if self._source is None:
            raise SchemaError(
                f"cannot decode {name}: Confluent-framed message (schema id {schema_id}) but no schema registry is configured "
                "(FLOTILLA_SCHEMA_REGISTRY_URL)"
            )
        try:
            parsed = cast(dict, parse_schema(json.loads(self._source.schema(schema_id)), {}))
        except UnknownSchemaId as exc:
            if len(self._unknown_ids) < 1024:  # a flood of made-up ids must not become a flood of lookups
                self._unknown_ids[schema_id] = exc
            raise
        except (ValueError, TypeError, KeyError) as exc:  # JSON or Avro that does not parse
            raise SchemaError(f"cannot decode {name}: schema id {schema_id} from the registry does not parse: {exc}") from exc
        fingerprint = schema_fingerprint(parsed)
        known = self.writers().get(fingerprint)
        # a producer's own compatible schema is resolved against ours like a frozen one
        names = {self.schema(n)["name"]: n for n in SCHEMA_NAMES}
        writer = Writer(
            known.name if known else names.get(parsed.get("name", ""), str(parsed.get("name"))),
            known.parsed if known else parsed,
            fingerprint,
            f"registry id {schema_id}",
        )
        self._by_id[schema_id] = writer
        return writer

    def _legacy_writer(self, name: str, version: int) -> Writer:
        found = self._legacy.get((name, version))
        if found is None:
            path = self.frozen_dir / f"v{version}"
            if not (path / f"{name}.avsc").exists():
                known = ", ".join(r.removeprefix("v") for r in self.releases() if (self.frozen_dir / r / f"{name}.avsc").exists())
                raise SchemaError(f"cannot decode {name}: unknown release {version} in an f1-framed message (known: {known})")
            parsed = parse_directory(path)[name]
            found = self._legacy[(name, version)] = Writer(name, parsed, schema_fingerprint(parsed), f"frozen/v{version}, f1 framing")
        return found

    def tagged_union_paths(self, name: str) -> tuple[tuple[_PathStep, ...], ...]:
        """Paths to unions with more than one record branch.

        fastavro picks such a branch by shape when the datum is a bare dict, so two payloads with
        the same fields (``JobRunPending`` and ``JobRunSucceeded``) would be confused silently;
        encode therefore insists on the ``(full_name, record)`` tuple that decode also returns.
        """
        if name not in self._union_paths:
            self._union_paths[name] = _find_record_unions(self.schema(name))
        return self._union_paths[name]

    def _tagger(self, name: str) -> _Tagger:
        if name not in self._taggers:
            parsed = self.schema(name)
            self._taggers[name] = _compile_tagger(parsed, parsed["__named_schemas"], {}) or _unchanged
        return self._taggers[name]

    def compiled(
        self,
        name: str,
        keep: str | None = None,
        skip: frozenset[str] = frozenset(),
        shared: frozenset[str] = frozenset(),
        only: Projection = frozenset(),
    ) -> Compiled:
        """The current schema ``name``'s reader and writer (see `schemas.compiled`), compiled once."""
        key = (name, keep, skip, shared, only)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = compile_schema(self.schema(name), keep=keep, skip=skip, shared=shared, only=only)
        return found

    def encode(self, name: str, record: Mapping[str, Any], *, validate_record: bool = True) -> bytes:
        """Validate ``record`` against the current schema ``name`` and serialise it.

        Validation runs before writing because the writer alone silently coerces some mismatches
        (a float into a long, an int into a boolean). It costs more than the writing itself, so
        the agents' hot paths pass ``validate_record=False`` for records that Flotilla's own
        code built (the job-state fold), whose shapes the test suite checks against the schemas.
        """
        parsed = self.schema(name)
        if not isinstance(record, Mapping):
            raise SchemaError(f"cannot encode {name}: expected a mapping, got {type(record).__name__}")
        if validate_record:
            for path in self.tagged_union_paths(name):
                where = _untagged(record, path, name)
                if where:
                    raise SchemaError(
                        f"cannot encode {name}: field {where} is a union of records; "
                        "give it as a (full_name, record) tuple, e.g. ('flotilla.JobLeased', {...})"
                    )
            tagged = self._tagger(name)(record)
            # the raising mode builds an error for every union branch it tries, valid or not, so it is
            # several times slower; run it only to explain a record already known to be invalid
            if not validate(tagged, parsed, raise_errors=False):
                try:
                    validate(tagged, parsed)
                except ValidationError as exc:
                    raise SchemaError(_validation_message(name, exc)) from exc
        out = bytearray(self.header(name))
        _write(name, self.compiled(name).write, out, record)
        return bytes(out)

    def encode_body(self, name: str, record: Mapping[str, Any]) -> bytes:
        """The Avro body alone of a ``name`` message (no framing, no validation), to be put in `framed`
        or inside another record (a job's spec, in its lease command)."""
        out = bytearray()
        _write(name, self.compiled(name).write, out, record)
        return bytes(out)

    def decode(
        self,
        name: str,
        data: bytes | None,
        *,
        keep: str | None = None,
        skip: frozenset[str] = frozenset(),
        shared: frozenset[str] = frozenset(),
        only: Projection = frozenset(),
    ) -> dict:
        """Deserialise a message in any of the three framings, resolving its writer's schema
        against the current one.

        Unions of several records decode to ``(full_name, record)`` tuples (see ``encode``).
        Records of type ``keep`` (a full name) in a message of the current schema come as `Encoded`,
        with the bytes they were read from (from an older schema, as plain dicts). In a message of
        the current schema, records of a type in ``skip`` come as None, and records of a type in
        ``shared`` are one value for each distinct encoding, never to be changed (`schemas.compiled`), and
        of the record types ``only`` names only the fields named there are read (a record of type ``keep``
        comes as a `Partial`).
        """
        reader = self.schema(name)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SchemaError(f"cannot decode {name}: expected bytes, got {type(data).__name__}")
        writer, start = self.writer_of(name, data)
        if writer.parsed is reader:
            body = bytes(data)
            try:
                record, end = self.compiled(name, keep, skip, shared, only).read(body, start)
            except (IndexError, ValueError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
                raise SchemaError(
                    f"cannot decode {name} ({writer.origin}): truncated or corrupt body ({type(exc).__name__}: {exc})"
                ) from exc
            if end < len(body):
                raise SchemaError(
                    f"cannot decode {name} ({writer.origin}): {len(body) - end} unread trailing byte(s); "
                    "corrupt body or a message of another schema"
                )
            if end > len(body):
                raise SchemaError(
                    f"cannot decode {name} ({writer.origin}): truncated or corrupt body (it ends {end - len(body)} byte(s) early)"
                )
            return cast(dict, record)
        return self._resolved(name, data, writer, start, reader)

    def decode_as_written(self, name: str, data: bytes | None) -> dict:
        """Deserialise a ``name`` message with its writer's schema alone: every field it was written with,
        including those the current schema no longer has (a job state's spec before release v5)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SchemaError(f"cannot decode {name}: expected bytes, got {type(data).__name__}")
        writer, start = self.writer_of(name, data)
        return self._resolved(name, data, writer, start, writer.parsed)

    def _resolved(self, name: str, data: bytes | bytearray | memoryview, writer: Writer, start: int, reader: dict) -> dict:
        """The body read with fastavro, ``writer``'s schema resolved against ``reader``."""
        stream = io.BytesIO(data)
        stream.seek(start)
        try:
            # Record names are only needed to tell apart the branches of multi-record unions, and
            # asking for them costs ~15% of decoding, so only those schemas ask.
            named = bool(self.tagged_union_paths(name))
            record = schemaless_reader(
                stream,
                writer.parsed,
                None if reader is writer.parsed else reader,
                return_record_name=named,
                return_record_name_override=named,
            )
        except Exception as exc:  # fastavro signals corrupt input with many exception types
            raise SchemaError(f"cannot decode {name} ({writer.origin}): truncated or corrupt body ({type(exc).__name__}: {exc})") from exc
        leftover = len(data) - stream.tell()
        if leftover:
            raise SchemaError(
                f"cannot decode {name} ({writer.origin}): {leftover} unread trailing byte(s); corrupt body or a message of another schema"
            )
        return cast(dict, record)  # a record schema reads as a dict


def _write(name: str, write: Callable[[bytearray, Any], None], out: bytearray, value: Any) -> None:
    try:
        write(out, value)
    except (TypeError, ValueError, OverflowError, KeyError, AttributeError, IndexError, struct.error) as exc:
        raise SchemaError(f"cannot encode {name}: {exc!r}") from exc


_Tagger = Callable[[Any], Any]


def _unchanged(value: Any) -> Any:
    return value


def _compile_tagger(node: Any, named: Mapping[str, Any], compiled: dict[str, _Tagger | None]) -> _Tagger | None:
    """A function that writes ``(full_name, record)`` for every union holding exactly one record.

    Given a bare dict for a union, fastavro validates the whole dict against each branch to pick
    one, so a nullable pod spec was validated in full on every write (half the encoding time).
    With one record branch and no map branch the choice is unambiguous, so the codec names it
    itself. Returns ``None`` where nothing below ``node`` needs tagging, so untouched subtrees are
    not copied.
    """
    if isinstance(node, str):
        if node not in named:
            return None
        node = named[node]
    if isinstance(node, list):
        records = [named[b] if isinstance(b, str) else b for b in node if _is_record(b, named)]
        inner = {r["name"]: _compile_tagger(r, named, compiled) for r in records}
        has_map = any(not isinstance(b, str) and b.get("type") == "map" for b in node)
        if len(records) == 1 and not has_map:
            only, tag_inner = records[0]["name"], inner[records[0]["name"]] or _unchanged

            def tag_single(value: Any) -> Any:
                if isinstance(value, Mapping):
                    return (only, tag_inner(value))
                if isinstance(value, tuple) and len(value) == 2:
                    return (value[0], tag_inner(value[1]))
                return value

            return tag_single
        if not any(inner.values()):
            return None

        def tag_branch(value: Any) -> Any:
            branch = inner.get(value[0]) if isinstance(value, tuple) and len(value) == 2 else None
            return (value[0], branch(value[1])) if branch else value

        return tag_branch
    kind = node.get("type")
    if kind == "record":
        if node["name"] in compiled:  # recursive type: reuse (None while still compiling)
            return compiled[node["name"]]
        compiled[node["name"]] = None
        fields = [(f["name"], t) for f in node["fields"] if (t := _compile_tagger(f["type"], named, compiled))]
        if not fields:
            return None

        def tag_record(value: Any) -> Any:
            if not isinstance(value, Mapping):
                return value
            copy = dict(value)
            for field, tag in fields:
                if field in copy:
                    copy[field] = tag(copy[field])
            return copy

        compiled[node["name"]] = tag_record
        return tag_record
    if kind in ("array", "map"):
        item = _compile_tagger(node["items" if kind == "array" else "values"], named, compiled)
        if item is None:
            return None
        if kind == "array":
            return lambda value: [item(v) for v in value] if isinstance(value, list) else value
        return lambda value: {k: item(v) for k, v in value.items()} if isinstance(value, Mapping) else value
    return None


def _find_record_unions(root: dict) -> tuple[tuple[_PathStep, ...], ...]:
    named = root["__named_schemas"]
    paths: list[tuple[_PathStep, ...]] = []

    def walk(node: Any, path: tuple[_PathStep, ...], seen: frozenset[str]) -> None:
        if isinstance(node, str):
            if node in named and node not in seen:
                walk(named[node], path, seen | {node})
        elif isinstance(node, list):
            records = [b for b in node if _is_record(b, named)]
            if len(records) > 1:
                paths.append(path)
            for branch in node:
                walk(branch, path, seen)
        elif node["type"] == "record":
            for field in node["fields"]:
                walk(field["type"], path + (field["name"],), seen | {node["name"]})
        elif node["type"] == "array":
            walk(node["items"], path + ("[]",), seen)
        elif node["type"] == "map":
            walk(node["values"], path + ("{}",), seen)

    walk(root, (), frozenset())
    return tuple(paths)


def _is_record(node: Any, named: Mapping[str, Any]) -> bool:
    if isinstance(node, str):
        node = named.get(node)
    return isinstance(node, dict) and node.get("type") == "record"


def _untagged(value: Any, path: tuple[_PathStep, ...], trail: str) -> str | None:
    """The location of the first bare dict at ``path`` inside ``value``, if any."""
    if not path:
        return trail if isinstance(value, dict) else None
    step, rest = path[0], path[1:]
    children: Iterable[tuple[Any, Any]]
    if step == "[]":
        children = enumerate(value) if isinstance(value, list) else ()
    elif step == "{}":
        children = value.items() if isinstance(value, dict) else ()
    else:
        children = [(step, value.get(step))] if isinstance(value, dict) else ()
    for key, child in children:
        found = _untagged(child, rest, f"{trail}[{key}]" if step in ("[]", "{}") else f"{trail}.{key}")
        if found:
            return found
    return None


def _describe(schema_node: Any) -> str:
    if isinstance(schema_node, list):
        return " | ".join(_describe(b) for b in schema_node)
    if isinstance(schema_node, dict):
        return schema_node.get("name") or schema_node["type"]
    return str(schema_node)


def _validation_message(name: str, error: ValidationError) -> str:
    # fastavro reports a union mismatch once per branch; fold those into one "expected a | b"
    expected: dict[tuple[str, str], list[str]] = {}
    for data in error.errors:
        shown = "None (or missing)" if data.datum is None else repr(data.datum)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        expected.setdefault((data.field, shown), []).append(_describe(data.schema))
    problems = [f"field {field}: got {shown}, expected {' | '.join(types)}" for (field, shown), types in expected.items()]
    return f"cannot encode {name}: " + "; ".join(problems)


_default = Registry(SCHEMA_DIR, FROZEN_DIR)
schema = _default.schema
encode = _default.encode
decode = _default.decode
decode_as_written = _default.decode_as_written
encode_body = _default.encode_body
framed = _default.framed
current_writer = _default.current_writer
use_schema_registry = _default.use_schema_registry
use_single_object = _default.use_single_object
writer_of = _default.writer_of
