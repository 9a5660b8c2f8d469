"""`flotilla queue create|update|get|list|delete`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from streams.client import Client


def register(commands: Any) -> None:
    queue = commands.add_parser("queue", help="manage queues")
    actions = queue.add_subparsers(dest="action", required=True, metavar="ACTION")

    for name, help_text in (("create", "create a queue"), ("update", "change a queue")):
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("name")
        parser.add_argument("--priority-factor", type=float, default=None if name == "update" else 1.0,
                            help="weight = 1/priority factor (default 1)")
        parser.add_argument("--owner", action="append", dest="user_owners", help="user allowed to submit (repeatable)")
        parser.add_argument("--group-owner", action="append", dest="group_owners", help="group allowed to submit (repeatable)")
        parser.add_argument("--cordon", action=argparse.BooleanOptionalAction, default=None,
                            help="refuse new jobs (--no-cordon to lift)")
        _common(parser)
        parser.set_defaults(func=_create if name == "create" else _update)

    for name, func, help_text in (("get", _get, "show a queue"), ("delete", _delete, "delete a queue")):
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("name")
        _common(parser)
        parser.set_defaults(func=func)

    listing = actions.add_parser("list", help="list queues")
    _common(listing)
    listing.set_defaults(func=_list)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--url", help="REST API (default $FLOTILLA_URL or http://127.0.0.1:8080)")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        "priority_factor": args.priority_factor,
        "user_owners": args.user_owners,
        "group_owners": args.group_owners,
        "cordoned": args.cordon,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _create(args: argparse.Namespace) -> int:
    queue = Client.from_env(args.url).call("POST", "/api/v1/queues", {"name": args.name, **_fields(args)})
    return _show(args, queue, f"created queue {queue['name']} (priority factor {queue['priority_factor']:g})")


def _update(args: argparse.Namespace) -> int:
    client = Client.from_env(args.url)
    current = client.call("GET", f"/api/v1/queues/{args.name}")
    queue = client.call("PUT", f"/api/v1/queues/{args.name}", {**current, **_fields(args)})
    return _show(args, queue, f"updated queue {queue['name']} (priority factor {queue['priority_factor']:g})")


def _get(args: argparse.Namespace) -> int:
    queue = Client.from_env(args.url).call("GET", f"/api/v1/queues/{args.name}")
    return _show(args, queue, _describe(queue))


def _delete(args: argparse.Namespace) -> int:
    answer = Client.from_env(args.url).call("DELETE", f"/api/v1/queues/{args.name}")
    return _show(args, answer, f"deleted queue {args.name}")


def _list(args: argparse.Namespace) -> int:
    queues = Client.from_env(args.url).call("GET", "/api/v1/queues")["queues"]
    if args.json:
        print(json.dumps(queues, indent=2))
        return 0
    if not queues:
        print("no queues")
        return 0
    print(f"{'NAME':<30} {'PRIORITY FACTOR':>15}  CORDONED  OWNERS")
    for queue in queues:
        owners = ",".join(queue["user_owners"] + [f"group:{g}" for g in queue["group_owners"]]) or "-"
        print(f"{queue['name']:<30} {queue['priority_factor']:>15g}  {'yes' if queue['cordoned'] else 'no':<8}  {owners}")
    return 0


def _describe(queue: dict[str, Any]) -> str:
    owners = ", ".join(queue["user_owners"] + [f"group:{g}" for g in queue["group_owners"]]) or "anyone"
    return (
        f"queue {queue['name']}\n  priority factor  {queue['priority_factor']:g}\n"
        f"  cordoned         {'yes' if queue['cordoned'] else 'no'}\n  owners           {owners}"
    )


def _show(args: argparse.Namespace, payload: Any, text: str) -> int:
    print(json.dumps(payload, indent=2) if args.json else text)
    return 0
