"""`flotilla cancel|preempt|reprioritize`: ask for a change to one job, to every unfinished job of a
job set, or (armadactl's `cancel|preempt queues` and `cancel|preempt executor`, for administrators)
to the jobs of queues or of an executor that match filters.

Each prints what was asked and the id of the event it wrote; the change itself happens when the
scheduler acts on it (follow it with `flotilla watch`). A job is named by its id, or as armadactl
names it, `QUEUE JOB_SET JOB_ID`; the API needs only the id, so the queue and job set are checked
against the job before the request is sent.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from streams.client.commands import CommandError
from streams.client.commands.connection import add_connection_options, client_for
from streams.client.commands.queues import add_queue_selection, names, select_queues
from streams.client.rest import Client


@dataclass(frozen=True)
class JobTarget:
    job_id: str
    queue: str | None = None
    job_set: str | None = None
    priority: float | None = None


def job_target(values: Sequence[str], *, priority: bool) -> JobTarget:
    """`JOB_ID` or `QUEUE JOB_SET JOB_ID`, followed by the new priority when ``priority``."""
    names = list(values[:-1] if priority else values)
    if len(names) not in (1, 3):
        expected = "[QUEUE JOB_SET] JOB_ID" + (" PRIORITY" if priority else "")
        raise ValueError(f"expected {expected}, got {len(values)} argument(s)")
    new_priority = None
    if priority:
        try:
            new_priority = float(values[-1])
        except ValueError:
            raise ValueError(f"invalid float value: {values[-1]!r}") from None
    if len(names) == 1:
        return JobTarget(names[0], priority=new_priority)
    return JobTarget(names[2], names[0], names[1], new_priority)


class _JobTargetAction(argparse.Action):
    """Reads the job's arguments while parsing, so a wrong count is a usage error (exit 2) before any request."""

    def __init__(self, *args: Any, priority: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.priority = priority

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        try:
            setattr(namespace, self.dest, job_target(values, priority=self.priority))
        except ValueError as exc:
            raise argparse.ArgumentError(self, str(exc)) from exc


def register(commands: Any) -> None:
    cancel = _targets(commands, "cancel", "cancel a job, or every unfinished job of a job set")
    _job(cancel, "cancel one job", reason=True).set_defaults(func=_cancel_job)
    _job_set(cancel, "cancel every unfinished job of a job set", reason=True).set_defaults(func=_cancel_job_set)

    preempt = _targets(commands, "preempt", "preempt a running job (it is not retried)")
    _job(preempt, "preempt one job", reason=True).set_defaults(func=_preempt_job)

    for targets, action in ((cancel, "cancel"), (preempt, "preempt")):
        queues = targets.add_parser("queues", aliases=["queue"], help=f"{action} the matching jobs of queues")
        add_queue_selection(queues)
        if action == "cancel":
            queues.add_argument(
                "--job-states",
                "-s",
                type=names,
                required=True,
                metavar="STATE,...",
                help="jobs in these states: queued, leased, pending, running",
            )
        _filters(queues)
        _common(queues, reason=True).set_defaults(func=_on_queues, action=action)
        executor = targets.add_parser("executor", help=f"{action} the matching jobs running on an executor")
        executor.add_argument("executor")
        executor.add_argument("--queues", "-q", type=names, metavar="QUEUE,...", help="only jobs of these queues (default: all)")
        _filters(executor)
        _common(executor, reason=True).set_defaults(func=_on_executor, action=action)

    reprioritize = _targets(commands, "reprioritize", "change the priority of a job, or of every unfinished job of a job set")
    _job(reprioritize, "change one job's priority", priority=True).set_defaults(func=_reprioritize_job)
    job_set = _job_set(reprioritize, "change the priority of every unfinished job of a job set")
    job_set.add_argument("priority", type=float, help=PRIORITY_HELP)
    job_set.set_defaults(func=_reprioritize_job_set)


PRIORITY_HELP = "new priority, >= 0 (lower is scheduled earlier)"


def _targets(commands: Any, name: str, help_text: str) -> Any:
    return commands.add_parser(name, help=help_text).add_subparsers(dest="target", required=True, metavar="TARGET")


def _job(targets: Any, help_text: str, *, reason: bool = False, priority: bool = False) -> argparse.ArgumentParser:
    usage = "[QUEUE JOB_SET] JOB_ID" + (" PRIORITY" if priority else "")
    parser = targets.add_parser("job", help=help_text, usage=f"%(prog)s {usage} [options]")
    parser.add_argument(
        "job",
        nargs="+",
        action=_JobTargetAction,
        priority=priority,
        metavar="ARG",
        help=f"{usage}: the job's id, or armadactl's queue, job set and job id" + (f"; then the {PRIORITY_HELP}" if priority else ""),
    )
    return _common(parser, reason=reason)


def _job_set(targets: Any, help_text: str, *, reason: bool = False) -> argparse.ArgumentParser:
    parser = targets.add_parser("job-set", help=help_text)
    parser.add_argument("queue")
    parser.add_argument("job_set")
    return _common(parser, reason=reason)


def _common(parser: argparse.ArgumentParser, *, reason: bool) -> argparse.ArgumentParser:
    if reason:
        parser.add_argument("--reason", help="why; kept in the job's state and events")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_connection_options(parser)
    return parser


def _filters(parser: argparse.ArgumentParser) -> None:
    """armadactl's priority class and pool filters: classes must be named, or --all-priority-classes given."""
    classes = parser.add_mutually_exclusive_group(required=True)
    classes.add_argument("--priority-classes", "-p", type=names, metavar="CLASS,...", help="jobs of these priority classes")
    classes.add_argument("--all-priority-classes", "-a", action="store_true", help="jobs of every priority class")
    parser.add_argument(
        "--pools", type=names, metavar="POOL,...", help="jobs running in these pools (default: all; a queued job is in every pool)"
    )


def _filter_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"priority_classes": [] if args.all_priority_classes else args.priority_classes, "pools": args.pools or []}
    if getattr(args, "job_states", None) is not None:
        body["job_states"] = args.job_states
    return {**body, **_reason(args)}


def _on_queues(args: argparse.Namespace) -> int:
    client = client_for(args)
    chosen = [queue["name"] for queue in select_queues(args, client.call("GET", "/api/v1/queues")["queues"])]
    body, done = _filter_body(args), {}
    for queue in chosen:
        if args.dry_run:
            print(f"would {args.action} the jobs of queue {queue} matching {json.dumps(body)}")
            continue
        done[queue] = client.call("POST", f"/api/v1/queues/{quote(queue, safe='')}/{args.action}", body)["job_ids"]
        if not args.json:
            print(f"{args.action} requested for {len(done[queue])} job(s) of queue {queue}")
    if args.json and not args.dry_run:
        print(json.dumps({"job_ids": done}))
    return 0


def _on_executor(args: argparse.Namespace) -> int:
    body = {**_filter_body(args), "queues": args.queues or []}
    answer = client_for(args).call("POST", f"/api/v1/executors/{quote(args.executor, safe='')}/{args.action}", body)
    print(json.dumps(answer) if args.json else f"{args.action} requested for {len(answer['job_ids'])} job(s) on executor {args.executor}")
    return 0


def _job_path(client: Client, target: JobTarget, action: str) -> str:
    """The job's control path, once the job is known to be in the queue and job set the user named (if any)."""
    path = f"/api/v1/jobs/{quote(target.job_id, safe='')}"
    if target.queue is not None:
        job = client.call("GET", path)
        if (job["queue"], job["job_set"]) != (target.queue, target.job_set):
            raise CommandError(
                f"job {target.job_id} is in job set {job['job_set']} of queue {job['queue']}, "
                f"not in job set {target.job_set} of queue {target.queue}"
            )
    return f"{path}/{action}"


def _job_set_path(args: argparse.Namespace, action: str) -> str:
    return f"/api/v1/queues/{quote(args.queue, safe='')}/jobsets/{quote(args.job_set, safe='')}/{action}"


def _reason(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.reason is None else {"reason": args.reason}


def _cancel_job(args: argparse.Namespace) -> int:
    client = client_for(args)
    path = _job_path(client, args.job, "cancel")
    return _send(args, client, path, _reason(args), f"cancel requested for job {args.job.job_id}")


def _cancel_job_set(args: argparse.Namespace) -> int:
    what = f"cancel requested for every unfinished job of job set {args.job_set} in queue {args.queue}"
    return _send(args, client_for(args), _job_set_path(args, "cancel"), _reason(args), what)


def _preempt_job(args: argparse.Namespace) -> int:
    client = client_for(args)
    path = _job_path(client, args.job, "preempt")
    return _send(args, client, path, _reason(args), f"preemption requested for job {args.job.job_id}")


def _reprioritize_job(args: argparse.Namespace) -> int:
    client, target = client_for(args), args.job
    what = f"priority {target.priority:g} requested for job {target.job_id}"
    return _send(args, client, _job_path(client, target, "reprioritize"), {"priority": target.priority}, what)


def _reprioritize_job_set(args: argparse.Namespace) -> int:
    what = f"priority {args.priority:g} requested for every unfinished job of job set {args.job_set} in queue {args.queue}"
    return _send(args, client_for(args), _job_set_path(args, "reprioritize"), {"priority": args.priority}, what)


def _send(args: argparse.Namespace, client: Client, path: str, body: dict[str, Any], what: str) -> int:
    answer = client.call("POST", path, body)
    print(json.dumps(answer) if args.json else f"{what} (event {', '.join(answer['event_ids'])})")
    return 0
