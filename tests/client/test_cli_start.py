"""The command line starts quickly: a client command (submit, watch, get) loads none of the heavy libraries
the services and replays need; each command imports those inside its handler. Checked in a fresh
interpreter, since this test process has them loaded already."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("aiokafka", "faust", "mode", "fastavro", "kubernetes", "rocksdict", "grpc", "numpy")
HEAVY_FLOTILLA = ("streams.archive", "streams.scheduler", "streams.replay.source", "streams.kafka", "streams.tables")


def test_loading_the_command_line_loads_no_heavy_library() -> None:
    probe = "import sys, streams.client.cli; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY_FLOTILLA))
    assert heavy == []
