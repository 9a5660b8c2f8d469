"""`flotilla version`: which Flotilla this command line is, as `armadactl version` says of itself."""

from __future__ import annotations

import argparse
import json
import platform
from typing import Any


def register(commands: Any) -> None:
    parser = commands.add_parser("version", help="print the version of this command line")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=_version)


def _version(args: argparse.Namespace) -> int:
    from importlib import metadata

    found = {
        "version": metadata.version("flotilla"),
        "python": platform.python_version(),
        "platform": f"{platform.system()}/{platform.machine()}",
    }
    print(json.dumps(found) if args.json else "\n".join(f"{key}: {value}" for key, value in found.items()))
    return 0
