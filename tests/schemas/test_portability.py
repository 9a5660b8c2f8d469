"""The .avsc files work with nothing but an Avro library and the load order in README.md."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import avro.io
import avro.schema
import fastavro
import pytest

from schemas import codec
from tests.kit.avro import as_record
from tests.schemas import samples

README = codec.SCHEMA_DIR / "README.md"
ROW = re.compile(r"^\| (\d+) \| `([a-z_]+\.avsc)` \| (.+) \|$", re.MULTILINE)


def documented_order() -> list[tuple[str, set[str]]]:
    """(file, named types it defines) per row of the README's load-order table."""
    rows = ROW.findall(README.read_text())
    assert [int(number) for number, _, _ in rows] == list(range(1, len(rows) + 1))
    return [(file_name, set(re.findall(r"\b([A-Z][A-Za-z]+)\b", defines.split("(uses")[0]))) for _, file_name, defines in rows]


@pytest.mark.parametrize("directory", [codec.SCHEMA_DIR, *sorted((codec.FROZEN_DIR).glob("v*"))], ids=lambda p: p.name)
def test_files_parse_in_documented_order_with_plain_fastavro(directory: Path) -> None:
    order = documented_order()
    assert sorted(name for name, _ in order) == sorted(p.name for p in directory.glob("*.avsc"))
    named: dict = {}
    for file_name, documented in order:
        before = set(named)
        fastavro.parse_schema(json.loads((directory / file_name).read_text()), named)
        defined = {full.removeprefix("flotilla.") for full in set(named) - before}
        if directory == codec.SCHEMA_DIR:
            assert defined == documented, f"{file_name} defines {sorted(defined)}, README says {sorted(documented)}"
        else:  # a release frozen before a named type was added lacks it
            assert defined <= documented, f"{directory.name}/{file_name}: {sorted(defined - documented)} not in the README"


def test_top_level_files_are_the_codec_schemas() -> None:
    names = [Path(file_name).stem for file_name, _ in documented_order()]
    assert names[-len(codec.SCHEMA_NAMES) :] == list(codec.SCHEMA_NAMES)


def test_a_file_alone_fails_without_its_dependencies() -> None:
    """Guards the claim that the order matters, so the README is not documenting a no-op."""
    with pytest.raises(fastavro.schema.UnknownType):
        fastavro.parse_schema(json.loads((codec.SCHEMA_DIR / "job_submitted.avsc").read_text()), {})


def test_every_named_type_is_in_the_flotilla_namespace() -> None:
    named: dict = {}
    for file_name, _ in documented_order():
        fastavro.parse_schema(json.loads((codec.SCHEMA_DIR / file_name).read_text()), named)
    assert named and all(name.startswith("flotilla.") for name in named)


def test_wire_format_is_avro_single_object_encoding() -> None:
    """What a non-Python consumer does: check the header against the schema's own fingerprint
    (Avro's CRC-64-AVRO of its Parsing Canonical Form), read the body with the current schema."""
    named: dict = {}
    for file_name, _ in documented_order():
        parsed = fastavro.parse_schema(json.loads((codec.SCHEMA_DIR / file_name).read_text()), named)
    record = {"request_key": "q/s", "reason": "bad", "payload": b"\x00", "rejected_at": 5}
    data = codec.encode("rejection", record)
    fingerprint = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    assert data[:10] == b"\xc3\x01" + bytes.fromhex(fingerprint)
    assert as_record(fastavro.schemaless_reader(io.BytesIO(data[10:]), parsed))["payload"] == b"\x00"


def test_fingerprint_follows_the_avro_specification() -> None:
    """The spec's example value: the fingerprint of the schema "null" is 7195948357588979594 (as a Java long)."""
    assert codec.schema_fingerprint(fastavro.parse_schema("null")) == (7195948357588979594).to_bytes(8, "little")


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
def test_apache_avro_computes_the_same_fingerprint_and_reads_the_body(name: str) -> None:
    """Avro's reference implementation, given only the files in the documented order, agrees."""
    names = avro.schema.Names()
    parsed = {
        Path(f).stem: avro.schema.make_avsc_object(json.loads((codec.SCHEMA_DIR / f).read_text()), names) for f, _ in documented_order()
    }
    data = codec.encode(name, samples.SAMPLES[name]())
    assert data[:10] == b"\xc3\x01" + bytes(parsed[name].fingerprint("CRC-64-AVRO"))
    schema = parsed[name]
    assert isinstance(schema, avro.schema.RecordSchema)
    read = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
    assert isinstance(read, dict)
    assert set(read) == {field.name for field in schema.fields}
