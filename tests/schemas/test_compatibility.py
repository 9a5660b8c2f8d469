"""Data written with any frozen release reads with the current schemas, in every framing."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from fastavro import schemaless_writer

from schemas import codec
from tests.schemas import samples


def frozen_cases() -> list[tuple[str, str]]:
    return [
        (release, name)
        for release in codec._default.releases()
        for name in codec.SCHEMA_NAMES
        if (codec.FROZEN_DIR / release / f"{name}.avsc").exists()
    ]


def body(writer: dict, record: dict) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, writer, record)
    return buffer.getvalue()


def test_release_v1_is_frozen_for_every_schema() -> None:
    assert {name for release, name in frozen_cases() if release == "v1"} == set(codec.SCHEMA_NAMES)


def test_every_current_schema_is_frozen() -> None:
    """Data written now must stay readable after the next change: see "Changing a schema" in schemas/README.md."""
    releases = codec._default.releases()
    frozen = {writer.fingerprint for release in releases for writer in codec._default.release_writers(release)}
    following = f"schemas/frozen/v{len(releases) + 1}"
    for name in codec.SCHEMA_NAMES:
        assert codec.current_writer(name).fingerprint in frozen, (
            f"schemas/{name}.avsc (or a file it uses) changed since the last frozen release; "
            f"freeze the current schemas: mkdir {following} && cp schemas/*.avsc {following}/"
        )


@pytest.mark.parametrize(("release", "name"), frozen_cases())
def test_frozen_writer_current_reader(release: str, name: str) -> None:
    writer = codec.parse_directory(codec.FROZEN_DIR / release)[name]
    data = codec.SINGLE_OBJECT_MAGIC + codec.schema_fingerprint(writer) + body(writer, samples.written_with(writer, name))
    # samples use only v1 fields; a release that dropped one gives its writers' samples in samples.written_with
    samples.assert_contains(samples.readable_from(writer, name), codec.decode(name, data), name)


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
def test_first_framing_still_reads(name: str) -> None:
    """Messages written before single-object encoding (f1, release byte, body) stay readable."""
    writer = codec.parse_directory(codec.FROZEN_DIR / "v1")[name]
    data = bytes((codec.LEGACY_MAGIC, 1)) + body(writer, samples.written_with(writer, name))
    samples.assert_contains(samples.readable_from(writer, name), codec.decode(name, data), name)


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


def freeze(current: Path, frozen: Path, release: str) -> None:
    """What schemas/README.md asks after a change: copy the current files to a new frozen release."""
    (frozen / release).mkdir()
    for path in current.glob("*.avsc"):
        shutil.copy(path, frozen / release / path.name)


@pytest.fixture
def release_v2(tmp_path: Path) -> codec.Registry:
    """A registry whose current schemas are a compatible change: new defaulted fields, a new event kind."""
    current = tmp_path / "schemas"
    shutil.copytree(codec.SCHEMA_DIR, current, ignore=shutil.ignore_patterns("frozen", "*.py", "*.md", "__pycache__"))
    frozen = tmp_path / "frozen"
    shutil.copytree(codec.FROZEN_DIR, frozen)
    add_field(current / "job_state.avsc", "Run", {"name": "preemptible", "type": "boolean", "default": True})
    add_field(current / "pod_spec.avsc", "Container", {"name": "image_pull_policy", "type": ["null", "string"], "default": None})
    sequence = json.loads((current / "event_sequence.avsc").read_text())
    event = sequence["fields"][-1]["type"]["items"]
    (payload,) = [field for field in event["fields"] if field["name"] == "payload"]
    payload["type"].append({"type": "record", "name": "JobRunAssigned", "fields": [{"name": "run_id", "type": "string"}]})
    (current / "event_sequence.avsc").write_text(json.dumps(sequence))
    return codec.Registry(current, frozen)


def test_changed_schema_changes_the_fingerprint_of_every_schema_using_it(release_v2: codec.Registry) -> None:
    changed = {name for name in codec.SCHEMA_NAMES if release_v2.current_writer(name).fingerprint != codec.current_writer(name).fingerprint}
    # pod_spec is used by the submit request, the spec (JobSubmitted, in events and commands); job_state changed itself (Run)
    assert changed == {"submit_request", "event_sequence", "job_submitted", "job_state", "executor_command"}


def test_new_reader_resolves_data_of_the_frozen_release(release_v2: codec.Registry) -> None:
    state = release_v2.decode("job_state", codec.encode("job_state", samples.job_state()))
    samples.assert_contains(samples.job_state(), state)
    assert [run["preemptible"] for run in state["runs"]] == [True, True]
    spec = release_v2.decode("job_submitted", codec.encode("job_submitted", samples.job_submitted()))
    assert spec["pod_spec"]["containers"][0]["image_pull_policy"] is None

    events = release_v2.decode("event_sequence", codec.encode("event_sequence", samples.event_sequence()))
    samples.assert_contains(samples.event_sequence(), events)


def test_old_reader_refuses_data_of_a_newer_schema_loudly(release_v2: codec.Registry) -> None:
    sequence = samples.event_sequence()
    sequence["events"].append({"event_id": "x", "created": 1, "job_id": "j", "payload": ("flotilla.JobRunAssigned", {"run_id": "r"})})
    data = release_v2.encode("event_sequence", sequence)
    assert data[2:10] == release_v2.current_writer("event_sequence").fingerprint
    assert release_v2.decode("event_sequence", data)["events"][-1]["payload"] == ("flotilla.JobRunAssigned", {"run_id": "r"})
    fingerprint = data[2:10].hex()
    with pytest.raises(codec.SchemaError, match=f"event_sequence: unknown writer schema, fingerprint {fingerprint}"):
        codec.decode("event_sequence", data)


def test_next_change_needs_only_the_frozen_copy(release_v2: codec.Registry, tmp_path: Path) -> None:
    """The change frozen as the next release, then another change of job_state: data of the latest
    real release and of the frozen change both read, found by fingerprint alone."""
    current, frozen = release_v2.current_dir, release_v2.frozen_dir
    existing = codec._default.releases()
    following = f"v{len(existing) + 1}"
    changed_state = release_v2.encode("job_state", samples.job_state())
    freeze(current, frozen, following)
    add_field(current / "job_state.avsc", "JobState", {"name": "owner", "type": "string", "default": "nobody"})
    release_v3 = codec.Registry(current, frozen)

    origins = sorted(w.origin for w in release_v3.writers().values() if w.name == "job_state")
    # A release that left job_state as it was shares its fingerprint with the release before: the newest names it.
    releases_of_state: dict[bytes, str] = {}
    for release in reversed(existing):
        for writer in codec._default.release_writers(release):
            if writer.name == "job_state":
                releases_of_state.setdefault(writer.fingerprint, f"frozen/{release}")
    assert origins == sorted(["current", *releases_of_state.values(), f"frozen/{following}"])
    for data, origin in [
        (codec.encode("job_state", samples.job_state()), f"frozen/{existing[-1]}"),
        (changed_state, f"frozen/{following}"),
    ]:
        assert release_v3.writer_of("job_state", data)[0].origin == origin
        state = release_v3.decode("job_state", data)
        samples.assert_contains(samples.job_state(), state)
        assert state["owner"] == "nobody"
