"""Flotilla's schemas as another team's Python service uses them: nothing of Flotilla but the files.

The ``.avsc`` files are parsed in the order schemas/README.md gives with plain fastavro; the
single-object header's fingerprint is computed by Avro's reference implementation (the ``avro``
package), because fastavro's canonical form leaves named types used across files as references.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import avro.schema
import fastavro

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
ROW = re.compile(r"^\| \d+ \| `([a-z_]+\.avsc)` \|", re.MULTILINE)


def load_order(directory: Path = SCHEMA_DIR) -> list[str]:
    """The file names of the README's load-order table, in order."""
    return ROW.findall((directory / "README.md").read_text())


class ThirdParty:
    def __init__(self, directory: Path = SCHEMA_DIR) -> None:
        named: dict[str, Any] = {}
        names = avro.schema.Names()
        self.parsed: dict[str, Any] = {}
        self.headers: dict[str, bytes] = {}
        for file_name in load_order(directory):
            raw = json.loads((directory / file_name).read_text())
            stem = Path(file_name).stem
            self.parsed[stem] = fastavro.parse_schema(raw, named)
            self.headers[stem] = b"\xc3\x01" + bytes(avro.schema.make_avsc_object(raw, names).fingerprint("CRC-64-AVRO"))

    def encode(self, name: str, record: dict[str, Any]) -> bytes:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, self.parsed[name], record)
        return self.headers[name] + body.getvalue()

    def decode(self, name: str, data: bytes) -> dict[str, Any]:
        assert data[:10] == self.headers[name], f"{data[:10].hex()} is not the single-object header of {name}"
        record = fastavro.schemaless_reader(io.BytesIO(data[10:]), self.parsed[name])
        assert isinstance(record, dict), "a record schema reads as a dict"
        return record
