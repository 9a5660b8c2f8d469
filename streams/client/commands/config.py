"""`flotilla config use-context|get-contexts|current-context`: the contexts of the config file (see streams.client.contexts)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from streams.client.commands import CommandError
from streams.client.commands.columns import aligned
from streams.client.contexts import ClientConfig, load_config, save_current_context


def register(commands: Any) -> None:
    config = commands.add_parser("config", help="the config file's contexts ($FLOTILLA_CONFIG or ~/.flotilla/config.yaml)")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    use = actions.add_parser("use-context", help="make a context the current one (rewrites the file, without its comments)")
    use.add_argument("name")
    use.set_defaults(func=_use_context)
    actions.add_parser("get-contexts", help="list the contexts, the current one marked with *").set_defaults(func=_get_contexts)
    actions.add_parser("current-context", help="print the current context's name").set_defaults(func=_current_context)


def _load() -> ClientConfig:
    config, warnings = load_config(os.environ)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return config


def _use_context(args: argparse.Namespace) -> int:
    config = save_current_context(_load(), args.name)
    print(f"switched to context {args.name} in {config.path}")
    return 0


def _get_contexts(args: argparse.Namespace) -> int:
    config = _load()
    if not config.contexts:
        print(f"no contexts in {config.path}")
        return 0
    rows = [("CURRENT", "NAME", "URL", "TOKEN")] + [
        ("*" if name == config.current else "", name, context.url or "-", "yes" if context.token else "no")
        for name, context in sorted(config.contexts.items())
    ]
    print("\n".join(aligned(rows)))
    return 0


def _current_context(args: argparse.Namespace) -> int:
    config = _load()
    context = config.current_context
    if context is None:
        raise CommandError(f"{config.path} names no currentContext")
    print(context.name)
    return 0
