"""The `flotilla` command line: one parser, each command group registered by its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from streams.scenarios import cli as scenario_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flotilla", description="Flotilla batch-job scheduler")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    scenario_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
