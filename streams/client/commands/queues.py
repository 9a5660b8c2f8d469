"""Queue commands in armadactl's verb-first spelling (`flotilla create|update|delete|get queue NAME`,
`flotilla get queues`) and the noun-first one (`flotilla queue create|update|delete|get NAME`,
`flotilla queue list`). Both spellings are built from one table below, so they take the same
options and run the same handlers. `flotilla cordon|uncordon queues` (beside `executor`:
`streams.client.commands.executors`) and the queue-wide cancel and
preempt (`streams.client.commands.control`) pick their queues as armadactl does (`select_queues`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from streams.client.commands import CommandError, executors, replays
from streams.client.commands.columns import aligned
from streams.client.commands.connection import add_connection_options, client_for


@dataclass(frozen=True)
class QueueCommand:
    verb: str  # armadactl's spelling: `flotilla <verb> <noun>`
    noun: str
    action: str  # the noun-first spelling: `flotilla queue <action>`
    help: str
    run: Callable[[argparse.Namespace], int]
    named: bool = True  # takes a queue name
    settings: bool = False  # takes --priority-factor, --owners, ...


def _create(args: argparse.Namespace) -> int:
    queue = client_for(args).call("POST", "/api/v1/queues", {"name": args.name, **_settings(args)})
    return _show(args, queue, f"created queue {queue['name']} (priority factor {queue['priority_factor']:g})")


def _update(args: argparse.Namespace) -> int:
    """The API replaces the whole queue (as Armada's UpdateQueue), so settings not given are read first and sent back."""
    client = client_for(args)
    current = client.call("GET", _path(args.name))
    queue = client.call("PUT", _path(args.name), {**current, **_settings(args)})
    return _show(args, queue, f"updated queue {queue['name']} (priority factor {queue['priority_factor']:g})")


def _delete(args: argparse.Namespace) -> int:
    answer = client_for(args).call("DELETE", _path(args.name))
    return _show(args, answer, f"deleted queue {args.name}")


def _get(args: argparse.Namespace) -> int:
    queue = client_for(args).call("GET", _path(args.name))
    return _show(args, queue, describe(queue))


def _list(args: argparse.Namespace) -> int:
    if args.at is not None or args.from_archive is not None:
        found = replays.queues_at(args)
        return _show(args, {"as_of": args.at, "queues": found}, "\n".join(replays.queues_at_table(found, args.at)))
    queues = client_for(args).call("GET", "/api/v1/queues")["queues"]
    return _show(args, queues, "\n".join(queue_table(queues)) if queues else "no queues")


COMMANDS = (
    QueueCommand("create", "queue", "create", "create a queue", _create, settings=True),
    QueueCommand("update", "queue", "update", "change a queue (settings not given keep their value)", _update, settings=True),
    QueueCommand("delete", "queue", "delete", "delete a queue", _delete),
    QueueCommand("get", "queue", "get", "show a queue", _get),
    QueueCommand("get", "queues", "list", "list queues", _list, named=False),
)


def register(commands: Any) -> dict[str, Any]:
    """Returns the subcommands of each verb (`get`...), for other command groups to join."""
    for verb, cordoned in (("cordon", True), ("uncordon", False)):
        targets = commands.add_parser(verb, help=f"{verb} queues or an executor (as armadactl {verb})").add_subparsers(
            dest="target", required=True, metavar="WHAT"
        )
        parser = targets.add_parser(
            "queues", aliases=["queue"], help=f"{'pause' if cordoned else 'resume'} scheduling of new jobs on queues"
        )
        add_queue_selection(parser)
        parser.add_argument("--json", action="store_true", help="print the queues changed, as JSON")
        add_connection_options(parser)
        parser.set_defaults(func=_cordon, cordoned=cordoned)
        executors.add_cordon(targets, cordoned)
    verbs = {
        verb: commands.add_parser(verb, help=f"{verb} queues (as armadactl {verb})").add_subparsers(
            dest="noun", required=True, metavar="WHAT"
        )
        for verb in dict.fromkeys(command.verb for command in COMMANDS)
    }
    queue = commands.add_parser("queue", help="manage queues: the same commands as create|update|delete|get queue")
    actions = queue.add_subparsers(dest="action", required=True, metavar="ACTION")
    for command in COMMANDS:
        for parser in (
            verbs[command.verb].add_parser(command.noun, help=command.help),
            actions.add_parser(command.action, help=command.help),
        ):
            _arguments(parser, command)
    return verbs


def _arguments(parser: argparse.ArgumentParser, command: QueueCommand) -> None:
    if command.named:
        parser.add_argument("name")
    if command.settings:
        parser.add_argument("--priority-factor", type=float, help="weight = 1/priority factor (the server's default: 1)")
        parser.add_argument(
            "--owners", type=names, action="extend", metavar="USER,...", help="users who may submit to and control the queue ('' for none)"
        )
        parser.add_argument(
            "--group-owners",
            type=names,
            action="extend",
            metavar="GROUP,...",
            help="groups whose members may submit to and control the queue ('' for none)",
        )
        parser.add_argument("--cordon", action=argparse.BooleanOptionalAction, help="refuse new jobs (--no-cordon to lift)")
        parser.add_argument("--labels", type=labels, metavar="KEY=VALUE,...", help="the queue's labels ('' for none)")
    if command.run is _list:
        parser.add_argument(
            "--at",
            type=replays.time_option,
            metavar="TIME",
            help="the queues as the log said at TIME (ISO 8601 or epoch ms), with their queued and running jobs and usage",
        )
        replays.add_log_options(parser, broker=False)
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(parser)
    parser.set_defaults(func=command.run)


def names(text: str) -> list[str]:
    """`a,b` -> [a, b]; '' -> [] so that an update can clear a list."""
    return [name.strip() for name in text.split(",") if name.strip()]


def labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` -> {k: v, k2: v2}; '' -> {}."""
    found = {}
    for pair in names(text):
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise argparse.ArgumentTypeError(f"label {pair!r} is not KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, in the API's field names."""
    given = {
        "priority_factor": args.priority_factor,
        "user_owners": args.owners,
        "group_owners": args.group_owners,
        "cordoned": args.cordon,
        "labels": args.labels,
    }
    return {key: value for key, value in given.items() if value is not None}


def _path(name: str) -> str:
    return f"/api/v1/queues/{quote(name, safe='')}"


def describe(queue: dict[str, Any]) -> str:
    rows = [
        ("priority factor", f"{queue['priority_factor']:g}"),
        ("cordoned", "yes" if queue["cordoned"] else "no"),
        ("owners", ", ".join(queue["user_owners"]) or "-"),
        ("group owners", ", ".join(queue["group_owners"]) or "-"),
        ("labels", _labels_text(queue.get("labels") or {})),
    ]
    return "\n".join([f"queue {queue['name']}", *(f"  {name:<16} {value}" for name, value in rows)])


def queue_table(queues: list[dict[str, Any]]) -> list[str]:
    """One row per queue under a header."""
    rows = [("NAME", "PRIORITY FACTOR", "CORDONED", "OWNERS", "GROUP OWNERS", "LABELS")] + [
        (
            queue["name"],
            f"{queue['priority_factor']:g}",
            "yes" if queue["cordoned"] else "no",
            ",".join(queue["user_owners"]) or "-",
            ",".join(queue["group_owners"]) or "-",
            _labels_text(queue.get("labels") or {}),
        )
        for queue in queues
    ]
    return aligned(rows)


def _labels_text(found: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(found.items())) or "-"


def _show(args: argparse.Namespace, payload: Any, text: str) -> int:
    print(json.dumps(payload, indent=2) if args.json else text)
    return 0


# ---------------------------------------------------------------------------- picking queues as armadactl does


def add_queue_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queues", nargs="*", metavar="QUEUE", help="queues by name (or give --selector)")
    parser.add_argument("--selector", type=labels, metavar="KEY=VALUE,...", help="the queues carrying all these labels")
    parser.add_argument("--inverse", action="store_true", help="every queue but those selected")
    parser.add_argument("--only-cordoned", action="store_true", help="only the cordoned queues among those selected")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, and do nothing")


def select_queues(args: argparse.Namespace, queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The queues named, or carrying every label of --selector (one of the two, never both), then
    inverted and narrowed to cordoned ones as asked; a named queue that does not exist is an error."""
    names, selector = list(dict.fromkeys(args.queues)), args.selector
    if names and selector:
        raise CommandError("queues can be selected either with a set of names or a set of labels, but not both")
    if not names and not selector:
        raise CommandError("queue selection must be narrowed down either by names or by --selector labels")
    known = {queue["name"]: queue for queue in queues}
    missing = [name for name in names if name not in known]
    if missing:
        raise CommandError(f"no such queue: {', '.join(missing)}")

    def chosen(queue: dict[str, Any]) -> bool:
        if names:
            return queue["name"] in names
        found = queue.get("labels") or {}
        return all(found.get(key) == value for key, value in selector.items())

    picked = [queue for queue in sorted(queues, key=lambda q: q["name"]) if chosen(queue) != args.inverse]
    return [queue for queue in picked if queue["cordoned"] or not args.only_cordoned]


def _cordon(args: argparse.Namespace) -> int:
    client = client_for(args)
    verb = "cordon" if args.cordoned else "uncordon"
    changed = []
    for queue in select_queues(args, client.call("GET", "/api/v1/queues")["queues"]):
        if args.dry_run:
            print(f"would {verb} queue {queue['name']}")
            continue
        changed.append(client.call("PUT", _path(queue["name"]), {**queue, "cordoned": args.cordoned}))
        if not args.json:
            print(f"{verb}ed queue {queue['name']}")
    if args.json and not args.dry_run:
        print(json.dumps(changed, indent=2))
    return 0
