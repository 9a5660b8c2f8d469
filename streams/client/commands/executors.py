"""`flotilla cordon executor NAME --reason TEXT` and `flotilla uncordon executor NAME` (armadactl's
`cordon|uncordon executor`, for administrators): the scheduler places no new job on a cordoned
executor's nodes, while the runs it holds go on. Joined to the `cordon|uncordon` verbs that
`streams.client.commands.queues` makes, as armadactl has one verb for both.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from streams.client.commands.connection import add_connection_options, client_for


def add_cordon(targets: Any, cordoned: bool) -> None:
    """The `executor` target of `flotilla cordon` (``cordoned``) or `flotilla uncordon`."""
    verb = "cordon" if cordoned else "uncordon"
    parser = targets.add_parser(
        "executor", help=f"{'pause' if cordoned else 'resume'} scheduling of new jobs on an executor's nodes (administrators)"
    )
    parser.add_argument("executor", help="the executor's name")
    if cordoned:
        parser.add_argument("--reason", required=True, help="why, shown with the executor until it is uncordoned")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_connection_options(parser)
    parser.set_defaults(func=_cordon, verb=verb)


def _cordon(args: argparse.Namespace) -> int:
    body = {"reason": args.reason} if args.verb == "cordon" else {}
    answer = client_for(args).call("POST", f"/api/v1/executors/{quote(args.executor, safe='')}/{args.verb}", body)
    print(json.dumps(answer) if args.json else f"{args.verb}ed executor {args.executor}")
    return 0
