"""The archive's on-disk format: Avro object container files of one envelope schema, and their index.

Each partition of an archived topic is a directory ``<topic>/<partition>/`` of segment files named
by their first offset (``00000000000000001234.avro``). A segment is a standard Avro object
container file (readable by any Avro library): a header naming the schema, the codec and the
topic and partition, then blocks, each one group commit of records in offset order and ending
with the file's 16-byte sync marker. Every record carries a CRC-32 of its key and value, so a
damaged block is found even where the codec has no checksum of its own.

Beside each segment, ``<first offset>.idx`` lists its blocks (position, first and last offset,
earliest and latest timestamp) so that a read from an offset or a time starts at the right block
instead of scanning everything. The index is derived: written after each block without a sync of
its own, checked against the segment when the archive is opened and rebuilt where it falls short.

Blocks are encoded by fastavro's own writer; reading parses the container's framing here, so that
a damaged or torn block is reported with its exact byte position, and decodes records with fastavro.
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.write import Writer

ENVELOPE: dict[str, Any] = {
    "type": "record",
    "name": "ArchivedRecord",
    "namespace": "flotilla.archive",
    "doc": "One record of a Flotilla topic as the broker stored it; value is the topic's Avro message (schemas/), as produced.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long", "doc": "the record's broker timestamp, milliseconds since the Unix epoch"},
        {"name": "key", "type": ["null", "bytes"], "default": None},
        {"name": "value", "type": ["null", "bytes"], "default": None},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}],
                },
            },
            "default": [],
        },
        {"name": "crc", "type": "long", "doc": "CRC-32 (zlib) of the key's bytes followed by the value's"},
    ],
}
PARSED_ENVELOPE = fastavro.parse_schema(ENVELOPE)

SEGMENT_SUFFIX = ".avro"
INDEX_SUFFIX = ".idx"
TOPIC_KEY, PARTITION_KEY = "flotilla.topic", "flotilla.partition"
MAGIC = b"Obj\x01"
SYNC_SIZE = 16

# Codecs the standard library decodes (Avro's names); fastavro encodes them.
_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "null": bytes,
    "deflate": lambda data: zlib.decompress(data, -15),
    "bzip2": bz2.decompress,
    "xz": lzma.decompress,
}
CODECS = tuple(_DECOMPRESS)


class BadBlock(ValueError):
    """A block that is cut short, lacks its sync marker, or does not decode; ``position`` is its first byte."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"byte {position}: {reason}")
        self.position = position
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int  # milliseconds since the epoch
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def crc_of(key: bytes | None, value: bytes | None) -> int:
    return zlib.crc32(value or b"", zlib.crc32(key or b""))


def segment_name(first_offset: int) -> str:
    return f"{first_offset:020d}{SEGMENT_SUFFIX}"


def index_path(segment: Path) -> Path:
    return segment.with_suffix(INDEX_SUFFIX)


def first_offset_of(segment: Path) -> int:
    return int(segment.stem)


def segments_in(directory: Path) -> list[Path]:
    """The partition directory's segments in offset order."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if p.suffix == SEGMENT_SUFFIX and p.stem.isdigit()), key=first_offset_of)


class BlockEncoder:
    """Encodes a segment's header and then its blocks with fastavro's container writer, into memory:
    the writer decides nothing about files, so a write that fails can be cut back exactly."""

    def __init__(self, topic: str, partition: int, codec: str, compression_level: int | None = None) -> None:
        if codec not in _DECOMPRESS:
            raise ValueError(f"unknown archive codec {codec!r}; one of {', '.join(CODECS)}")
        self._buffer = io.BytesIO()
        self._writer = Writer(
            self._buffer,
            PARSED_ENVELOPE,
            codec=codec,
            sync_interval=1 << 62,  # blocks end where we say: one per group commit
            metadata={TOPIC_KEY: topic, PARTITION_KEY: str(partition)},
            compression_level=compression_level,
        )
        self.header = self._take()

    def _take(self) -> bytes:
        data = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return data

    def block(self, records: list[Record]) -> bytes:
        write = self._writer.write
        for r in records:
            write(to_envelope(r))
        self._writer.flush()
        return self._take()


@dataclass(frozen=True)
class Header:
    metadata: dict[str, bytes]
    sync: bytes
    codec: str
    schema: Any  # the parsed writer schema
    end: int  # position of the first block

    @property
    def topic(self) -> str:
        return self.metadata.get(TOPIC_KEY, b"").decode()

    @property
    def partition(self) -> int:
        return int(self.metadata.get(PARTITION_KEY, b"-1"))


def read_long(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An Avro long (zigzag varint) at ``pos``: (value, position after it); IndexError if cut short."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def read_header(data: bytes | memoryview) -> Header:
    """The container header at the start of ``data``; BadBlock(0, ...) if it is not one."""
    if bytes(data[:4]) != MAGIC:
        raise BadBlock(0, "not an Avro object container file (bad magic)")
    try:
        pos, metadata = 4, {}
        while True:
            count, pos = read_long(data, pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = read_long(data, pos)  # the block's size in bytes
            for _ in range(count):
                size, pos = read_long(data, pos)
                key = bytes(data[pos : pos + size]).decode()
                pos += size
                size, pos = read_long(data, pos)
                metadata[key] = bytes(data[pos : pos + size])
                pos += size
        sync = bytes(data[pos : pos + SYNC_SIZE])
        if len(sync) != SYNC_SIZE:
            raise IndexError
        codec = metadata.get("avro.codec", b"null").decode()
        if codec not in _DECOMPRESS:
            raise BadBlock(0, f"codec {codec!r} cannot be read here (readable: {', '.join(CODECS)})")
        schema = fastavro.parse_schema(json.loads(metadata["avro.schema"]))
    except (IndexError, ValueError, KeyError) as exc:
        if isinstance(exc, BadBlock):
            raise
        raise BadBlock(0, f"the file header is cut short or damaged ({type(exc).__name__})") from exc
    return Header(metadata=metadata, sync=sync, codec=codec, schema=schema, end=pos + SYNC_SIZE)


@dataclass(frozen=True)
class Block:
    position: int
    end: int  # just after its sync marker
    count: int
    payload: bytes | memoryview  # the codec's bytes


def blocks(data: bytes | memoryview, header: Header, start: int | None = None) -> Iterator[Block]:
    """The blocks of a segment's ``data`` from ``start`` (default: the first), framing checked; BadBlock at the first bad one."""
    pos = header.end if start is None else start
    size_of_data = len(data)
    while pos < size_of_data:
        try:
            count, at = read_long(data, pos)
            size, at = read_long(data, at)
        except (IndexError, ValueError) as exc:
            raise BadBlock(pos, "block header cut short or damaged") from exc
        if count <= 0 or size < 0:
            raise BadBlock(pos, f"impossible block header (count {count}, size {size})")
        end = at + size + SYNC_SIZE
        if end > size_of_data:
            raise BadBlock(pos, f"block cut short: {end - size_of_data} of its {end - pos} bytes are missing")
        if bytes(data[end - SYNC_SIZE : end]) != header.sync:
            raise BadBlock(pos, "sync marker missing at the end of the block")
        yield Block(pos, end, count, data[at : end - SYNC_SIZE])
        pos = end


def decode(block: Block, header: Header) -> list[dict[str, Any]]:
    """The block's envelope records, each one's CRC checked; BadBlock if anything is wrong."""
    try:
        raw = _DECOMPRESS[header.codec](bytes(block.payload))
        stream = io.BytesIO(raw)
        read = fastavro.schemaless_reader
        records: list[dict[str, Any]] = [read(stream, header.schema, None) for _ in range(block.count)]  # type: ignore[misc]
        if stream.tell() != len(raw):
            raise ValueError(f"{len(raw) - stream.tell()} bytes left over after {block.count} records")
    except Exception as exc:  # whatever the codec or the decoder raise, the block is damaged
        raise BadBlock(block.position, f"block does not decode: {type(exc).__name__}: {exc}") from exc
    for record in records:
        if crc_of(record["key"], record["value"]) != record["crc"]:
            raise BadBlock(block.position, f"checksum mismatch in the record at offset {record['offset']}")
    return records


def to_envelope(r: Record) -> dict[str, Any]:
    """The envelope record a segment holds for ``r``, with its CRC (`to_record` reads it back)."""
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": r.key,
        "value": r.value,
        "headers": [{"key": k, "value": v} for k, v in r.headers],
        "crc": crc_of(r.key, r.value),
    }


def to_record(envelope: dict[str, Any]) -> Record:
    return Record(
        topic=envelope["topic"],
        partition=envelope["partition"],
        offset=envelope["offset"],
        timestamp=envelope["timestamp"],
        key=envelope["key"],
        value=envelope["value"],
        headers=tuple((h["key"], h["value"]) for h in envelope["headers"]),
    )


# ---------------------------------------------------------------------------------------------- index

_ENTRY = struct.Struct("<qqqqq")  # position, first offset, last offset, earliest and latest timestamp


@dataclass(frozen=True)
class IndexEntry:
    position: int
    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int

    def pack(self) -> bytes:
        return _ENTRY.pack(self.position, self.first_offset, self.last_offset, self.min_timestamp, self.max_timestamp)


def entry_for(position: int, records: list[Record] | list[dict[str, Any]]) -> IndexEntry:
    def field(r: Any, name: str) -> int:
        return int(r[name] if isinstance(r, dict) else getattr(r, name))

    stamps = [field(r, "timestamp") for r in records]
    return IndexEntry(position, field(records[0], "offset"), field(records[-1], "offset"), min(stamps), max(stamps))


def read_index(path: Path) -> list[IndexEntry]:
    """The entries of an index file (a torn last entry is dropped); empty if there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % _ENTRY.size
    return [IndexEntry(*_ENTRY.unpack_from(data, at)) for at in range(0, whole, _ENTRY.size)]
