"""The Faust codecs registered as flotilla.<schema> serialise through Faust's own entry points."""

from __future__ import annotations

import pytest
from faust.exceptions import ValueDecodeError
from faust.serializers import codecs
from faust.serializers.registry import Registry

from schemas import codec, faust_codec
from tests.schemas import samples


@pytest.fixture(autouse=True)
def registered() -> None:
    faust_codec.register_codecs()


@pytest.mark.parametrize("name", codec.SCHEMA_NAMES)
def test_round_trip_through_faust_codecs(name: str) -> None:
    serializer = f"flotilla.{name}"
    data = codecs.dumps(serializer, samples.SAMPLES[name]())
    assert data == codec.encode(name, samples.SAMPLES[name]())
    samples.assert_contains(samples.SAMPLES[name](), codecs.loads(serializer, data))


def test_register_is_idempotent() -> None:
    first = {name: codecs.get_codec(f"flotilla.{name}") for name in codec.SCHEMA_NAMES}
    faust_codec.register_codecs()
    assert all(codecs.get_codec(f"flotilla.{name}") is c for name, c in first.items())
    assert faust_codec.codec_name("job_state") == "flotilla.job_state"


def test_topic_value_path_uses_the_codec() -> None:
    """Registry.dumps_value/loads_value is what topics and tables call with value_serializer=..."""
    registry = Registry()
    data = registry.dumps_value(None, samples.queue(), serializer="flotilla.queue")
    assert data is not None
    assert data[:2] == codec.SINGLE_OBJECT_MAGIC
    assert registry.loads_value(None, data, serializer="flotilla.queue")["name"] == samples.QUEUE
    with pytest.raises(ValueDecodeError, match="unknown framing"):
        registry.loads_value(None, b'{"name": "q"}', serializer="flotilla.queue")


def test_chained_codec_keeps_its_schema() -> None:
    chained = codecs.get_codec("flotilla.queue") | codecs.binary()
    assert chained.loads(chained.dumps(samples.queue()))["name"] == samples.QUEUE


def test_unknown_schema_fails_at_construction() -> None:
    with pytest.raises(codec.SchemaError, match="unknown schema 'pod_spec'"):
        faust_codec.AvroCodec("pod_spec")
