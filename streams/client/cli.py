"""The `flotilla` command line: one parser, each command group registered by its own module.

Command modules import their heavy dependencies (Faust, the broker) inside their handlers so that
client commands start quickly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from streams.client.commands import (
    CommandError,
    config,
    control,
    explain,
    jobs,
    log,
    queues,
    replays,
    scenario,
    services,
    version,
    watch,
    whatif,
)
from streams.client.commands.connection import add_connection_options
from streams.client.contexts import ConfigError
from streams.client.jobfile import JobFileError
from streams.client.rest import ClientError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flotilla", description="Flotilla batch-job scheduler")
    add_connection_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    services.register(commands)
    verbs = queues.register(commands)
    jobs.register(commands)
    control.register(commands)
    watch.register(commands)
    config.register(commands)
    scenario.register(commands)
    version.register(commands)
    log.register(commands)
    replays.register(commands)
    explain.register(commands, verbs["get"])
    whatif.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ClientError, CommandError, ConfigError, JobFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
