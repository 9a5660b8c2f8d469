"""Data written with any frozen release reads with the current schemas."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from fastavro import schemaless_writer

from schemas import codec
from tests.schemas import samples


def frozen_cases() -> list[tuple[int, str]]:
    return [
        (version, name)
        for version in codec._default.frozen_versions()
        for name in codec.SCHEMA_NAMES
        if version in codec.known_versions(name)
    ]


def test_release_v1_is_frozen_for_every_schema() -> None:
    assert (1, "event_sequence") in frozen_cases()
    assert {name for version, name in frozen_cases() if version == 1} == set(codec.SCHEMA_NAMES)


def test_current_release_matches_its_frozen_copy() -> None:
    """Editing a schema without bumping CURRENT_VERSION and freezing it would mislabel data."""
    frozen = codec.FROZEN_DIR / f"v{codec.CURRENT_VERSION}"
    current_files = sorted(p.name for p in codec.SCHEMA_DIR.glob("*.avsc"))
    assert sorted(p.name for p in frozen.glob("*.avsc")) == current_files
    for file_name in current_files:
        assert json.loads((frozen / file_name).read_text()) == json.loads((codec.SCHEMA_DIR / file_name).read_text()), file_name


@pytest.mark.parametrize(("version", "name"), frozen_cases())
def test_frozen_writer_current_reader(version: int, name: str) -> None:
    writer = codec.parse_directory(codec.FROZEN_DIR / f"v{version}")[name]
    buffer = io.BytesIO(bytes((codec.MAGIC, version)))
    buffer.seek(2)
    schemaless_writer(buffer, writer, samples.SAMPLES[name]())
    # samples use only v1 fields; a later release that renames or drops one needs its own sample here
    samples.assert_contains(samples.SAMPLES[name](), codec.decode(name, buffer.getvalue()), name)


def add_field(path: Path, record: str, field: dict) -> None:
    """Add ``field`` to the record named ``record`` wherever it is defined in ``path``."""

    def visit(node):
        if isinstance(node, dict):
            if node.get("type") == "record" and node["name"] == record:
                node["fields"].append(field)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    schema = json.loads(path.read_text())
    visit(schema)
    path.write_text(json.dumps(schema))


@pytest.fixture
def release_v2(tmp_path: Path) -> codec.Registry:
    """A registry whose current schemas are a compatible v2: new defaulted fields, a new event kind."""
    current = tmp_path / "schemas"
    shutil.copytree(codec.SCHEMA_DIR, current, ignore=shutil.ignore_patterns("frozen", "*.py", "*.md", "__pycache__"))
    frozen = tmp_path / "frozen"
    shutil.copytree(codec.FROZEN_DIR / "v1", frozen / "v1")
    add_field(current / "job_state.avsc", "Run", {"name": "preemptible", "type": "boolean", "default": True})
    add_field(current / "pod_spec.avsc", "Container", {"name": "image_pull_policy", "type": ["null", "string"], "default": None})
    sequence = json.loads((current / "event_sequence.avsc").read_text())
    event = sequence["fields"][-1]["type"]["items"]
    (payload,) = [field for field in event["fields"] if field["name"] == "payload"]
    payload["type"].append({"type": "record", "name": "JobRunAssigned", "fields": [{"name": "run_id", "type": "string"}]})
    (current / "event_sequence.avsc").write_text(json.dumps(sequence))
    return codec.Registry(current, frozen, current_version=2)


def test_v2_reader_resolves_v1_data(release_v2: codec.Registry) -> None:
    assert release_v2.known_versions("job_state") == (1, 2)
    state = release_v2.decode("job_state", codec.encode("job_state", samples.job_state()))
    samples.assert_contains(samples.job_state(), state)
    assert [run["preemptible"] for run in state["runs"]] == [True, True]
    assert state["spec"]["pod_spec"]["containers"][0]["image_pull_policy"] is None

    events = release_v2.decode("event_sequence", codec.encode("event_sequence", samples.event_sequence()))
    samples.assert_contains(samples.event_sequence(), events)


def test_v2_writes_v2_and_v1_reader_refuses_it_loudly(release_v2: codec.Registry) -> None:
    sequence = samples.event_sequence()
    sequence["events"].append({"event_id": "x", "created": 1, "job_id": "j", "payload": ("flotilla.JobRunAssigned", {"run_id": "r"})})
    data = release_v2.encode("event_sequence", sequence)
    assert data[1] == 2
    assert release_v2.decode("event_sequence", data)["events"][-1]["payload"] == ("flotilla.JobRunAssigned", {"run_id": "r"})
    with pytest.raises(codec.SchemaError, match=r"unknown version 2 for schema 'event_sequence' \(known: 1\)"):
        codec.decode("event_sequence", data)
