"""Binary Avro codec for Flotilla's public records.

Wire format of every message: one magic byte (0xF1), one byte giving the release of the schema the
writer used, then the Avro binary body without a header (fastavro's ``schemaless_writer``). The
version byte lets a reader resolve old data against its current schema instead of guessing, and the
magic byte makes a message that is not ours (JSON, another codec) fail loudly at the first byte.

Schemas are parsed once per process and cached; ``encode``/``decode`` sit on the hot path.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import UnknownType
from fastavro.validation import ValidationError, validate

MAGIC = 0xF1
CURRENT_VERSION = 1
SCHEMA_NAMES: tuple[str, ...] = (
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

_HEADER_SIZE = 2
_PathStep = str  # a field name, or "[]" for array items / "{}" for map values


class SchemaError(ValueError):
    """A record or message that does not fit the Flotilla Avro contract."""


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


class Registry:
    """Current schemas plus the frozen releases, parsed lazily once each.

    Separate from the module-level functions so that tests can point one at a scratch copy of the
    schemas and exercise resolution between releases that do not exist yet.
    """

    def __init__(self, current_dir: Path, frozen_dir: Path, current_version: int) -> None:
        self.current_dir = current_dir
        self.frozen_dir = frozen_dir
        self.current_version = current_version
        self._current: dict[str, dict] | None = None
        self._frozen: dict[int, dict[str, dict]] = {}
        self._writers: dict[tuple[str, int], dict] = {}
        self._union_paths: dict[str, tuple[tuple[_PathStep, ...], ...]] = {}
        self._taggers: dict[str, _Tagger] = {}
        self._splices: dict[tuple[str, str], Splice] = {}

    def schema(self, name: str) -> dict:
        """The current parsed schema of top-level record ``name``."""
        if name not in SCHEMA_NAMES:
            raise SchemaError(f"unknown schema {name!r} (known: {', '.join(SCHEMA_NAMES)})")
        if self._current is None:
            self._current = parse_directory(self.current_dir)
        return self._current[name]

    def frozen_versions(self) -> tuple[int, ...]:
        """Releases that have a frozen copy under ``<frozen_dir>/v<N>/``."""
        found = (re.fullmatch(r"v(\d+)", p.name) for p in self.frozen_dir.iterdir() if p.is_dir())
        return tuple(sorted(int(m.group(1)) for m in found if m))

    def known_versions(self, name: str) -> tuple[int, ...]:
        """Versions of schema ``name`` that ``decode`` can read."""
        versions = {v for v in self.frozen_versions() if (self.frozen_dir / f"v{v}" / f"{name}.avsc").exists()}
        versions.add(self.current_version)
        return tuple(sorted(versions))

    def writer_schema(self, name: str, version: int) -> dict:
        """The schema that wrote a ``name`` message stamped with ``version``."""
        cached = self._writers.get((name, version))
        if cached is not None:
            return cached
        if version == self.current_version:
            found = self.schema(name)
        elif version in self.known_versions(name):
            if version not in self._frozen:
                self._frozen[version] = parse_directory(self.frozen_dir / f"v{version}")
            found = self._frozen[version][name]
        else:
            known = ", ".join(map(str, self.known_versions(name)))
            raise SchemaError(f"unknown version {version} for schema {name!r} (known: {known})")
        self._writers[(name, version)] = found
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
        record = self._tagger(name)(record)
        if not validate_record:
            return self._write(name, parsed, record)
        for path in self.tagged_union_paths(name):
            where = _untagged(record, path, name)
            if where:
                raise SchemaError(
                    f"cannot encode {name}: field {where} is a union of records; "
                    "give it as a (full_name, record) tuple, e.g. ('flotilla.JobLeased', {...})"
                )
        # the raising mode builds an error for every union branch it tries, valid or not, so it is
        # several times slower; run it only to explain a record already known to be invalid
        if not validate(record, parsed, raise_errors=False):
            try:
                validate(record, parsed)
            except ValidationError as exc:
                raise SchemaError(_validation_message(name, exc)) from exc
        return self._write(name, parsed, record)

    def _write(self, name: str, parsed: dict, record: Mapping[str, Any]) -> bytes:
        buffer = io.BytesIO()
        buffer.write(bytes((MAGIC, self.current_version)))
        try:
            schemaless_writer(buffer, parsed, record)
        except (TypeError, ValueError, OverflowError, KeyError, AttributeError) as exc:
            raise SchemaError(f"cannot encode {name}: {exc!r}") from exc
        return buffer.getvalue()

    def splice(self, name: str, field: str) -> Splice:
        """A writer of ``name`` records that takes the encoding of ``field`` ready-made (see Splice)."""
        key = (name, field)
        if key not in self._splices:
            self._splices[key] = Splice(self, name, field)
        return self._splices[key]

    def decode(self, name: str, data: bytes | None) -> dict:
        """Deserialise a message, resolving its writer's version against the current schema.

        Unions of several records decode to ``(full_name, record)`` tuples (see ``encode``).
        """
        reader = self.schema(name)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SchemaError(f"cannot decode {name}: expected bytes, got {type(data).__name__}")
        if len(data) < _HEADER_SIZE:
            raise SchemaError(f"cannot decode {name}: truncated message of {len(data)} byte(s), no header")
        if data[0] != MAGIC:
            raise SchemaError(
                f"cannot decode {name}: wrong magic byte 0x{data[0]:02x} (expected 0x{MAGIC:02x}); not a Flotilla Avro message"
            )
        version = data[1]
        writer = self.writer_schema(name, version)
        stream = io.BytesIO(data)
        stream.seek(_HEADER_SIZE)
        try:
            # Record names are only needed to tell apart the branches of multi-record unions, and
            # asking for them costs ~15% of decoding, so only those schemas ask.
            named = bool(self.tagged_union_paths(name))
            record = schemaless_reader(
                stream,
                writer,
                None if writer is reader else reader,
                return_record_name=named,
                return_record_name_override=named,
            )
        except Exception as exc:  # fastavro signals corrupt input with many exception types
            raise SchemaError(f"cannot decode {name} v{version}: truncated or corrupt body ({type(exc).__name__}: {exc})") from exc
        leftover = len(data) - stream.tell()
        if leftover:
            raise SchemaError(
                f"cannot decode {name} v{version}: {leftover} unread trailing byte(s); corrupt body or a message of another schema"
            )
        return cast(dict, record)  # a record schema reads as a dict


_Tagger = Callable[[Any], Any]


class Splice:
    """Writes records of one schema with the encoding of one field supplied by the caller.

    Avro writes a record as its fields' encodings one after another, so a field that never
    changes (a job's spec, in every state the job goes through) can be encoded once and copied
    into each later record. The bytes are exactly what ``encode`` writes (no validation: for
    records Flotilla's own code built, like ``encode(..., validate_record=False)``).
    """

    def __init__(self, registry: Registry, name: str, field: str) -> None:
        parsed = registry.schema(name)
        named = parsed["__named_schemas"]
        fields = parsed["fields"]
        position = next((i for i, f in enumerate(fields) if f["name"] == field), None)
        if position is None:
            raise SchemaError(f"schema {name!r} has no field {field!r}")
        field_type = fields[position]["type"]

        def part(schema: dict) -> dict:
            return {**schema, "__fastavro_parsed": True, "__named_schemas": named}

        self.name, self.field = name, field
        self._header = bytes((MAGIC, registry.current_version))
        self._head = part({"type": "record", "name": f"{name}.head", "fields": fields[:position]})
        self._tail = part({"type": "record", "name": f"{name}.tail", "fields": fields[position + 1 :]})
        self._field = part(named[field_type]) if isinstance(field_type, str) else part(field_type)
        self._tag_record = registry._tagger(name)
        self._tag_field = _compile_tagger(field_type, named, {}) or _unchanged

    def field_bytes(self, value: Any) -> bytes:
        """The encoding of ``value`` as the spliced field."""
        buffer = io.BytesIO()
        self._write(buffer, self._field, self._tag_field(value))
        return buffer.getvalue()

    def encode(self, record: Mapping[str, Any], field_bytes: bytes) -> bytes:
        """``record`` (whose own value of the field is not read) with ``field_bytes`` in its place."""
        rest = self._tag_record({k: v for k, v in record.items() if k != self.field})
        buffer = io.BytesIO()
        buffer.write(self._header)
        self._write(buffer, self._head, rest)
        buffer.write(field_bytes)
        self._write(buffer, self._tail, rest)
        return buffer.getvalue()

    def _write(self, buffer: io.BytesIO, schema: dict, value: Any) -> None:
        try:
            schemaless_writer(buffer, schema, value)
        except (TypeError, ValueError, OverflowError, KeyError, AttributeError) as exc:
            raise SchemaError(f"cannot encode {self.name}: {exc!r}") from exc


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


_default = Registry(SCHEMA_DIR, FROZEN_DIR, CURRENT_VERSION)
schema = _default.schema
known_versions = _default.known_versions
encode = _default.encode
decode = _default.decode
splice = _default.splice
