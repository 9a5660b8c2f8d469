"""The `--url` and `--token` options and the client every API command builds from them.

The options are accepted both before the command (`flotilla --url U get queues`) and after it
(`flotilla get queues --url U`): both spellings land in the same two attributes. They default to
SUPPRESS so that a command's parser, which argparse applies after the top-level one, does not
overwrite a value given before the command with its own default.
"""

from __future__ import annotations

import argparse
import os
import sys

from streams.client.contexts import TOKEN_ENV, URL_ENV, load_config, resolve
from streams.client.rest import Client


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help=f"REST API (default ${URL_ENV}, then the config file's current context, then http://127.0.0.1:8080)",
    )
    parser.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help=f"bearer token (default ${TOKEN_ENV}, then the current context); "
        "other local users can see a flag in the process list, the config file they cannot",
    )


def client_for(args: argparse.Namespace) -> Client:
    """The client for this command: flags, environment, config file, default (see streams.client.contexts)."""
    flag_url, flag_token = getattr(args, "url", None), getattr(args, "token", None)
    context = None
    # Read only when it can matter, so a broken config file does not stop a command given everything it needs.
    if not (flag_url or os.environ.get(URL_ENV)) or not (flag_token or os.environ.get(TOKEN_ENV)):
        config, warnings = load_config(os.environ)
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        context = config.current_context
    endpoint = resolve(flag_url, flag_token, os.environ, context)
    return Client(endpoint.url, token=endpoint.token)
