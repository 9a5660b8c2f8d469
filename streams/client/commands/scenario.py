"""`flotilla scenario run FILE [--json]` and `flotilla scenario check DIR`.

The runner (and numpy with it) is imported by the handlers, so that every other command starts quickly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    scenario = subparsers.add_parser("scenario", help="replay scheduler acceptance scenarios")
    commands = scenario.add_subparsers(dest="scenario_command", required=True, metavar="SUBCOMMAND")
    run_parser = commands.add_parser("run", help="run one scenario file")
    run_parser.add_argument("file", type=Path)
    run_parser.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    run_parser.set_defaults(func=_run)
    check_parser = commands.add_parser("check", help="run every scenario in a directory against its expectations")
    check_parser.add_argument("directory", type=Path)
    check_parser.set_defaults(func=_check)


def _run(args: argparse.Namespace) -> int:
    from streams.scenarios.runner import expected_counts, load, run

    doc = load(args.file)
    outcome = run(doc)
    document = outcome.to_json(expected_counts(doc))
    if args.json:
        print(json.dumps(document, sort_keys=False))
        return 0
    print(outcome.name)
    for entry in document["rounds"]:
        print(
            f"  round {entry['round']}: scheduled {len(entry['scheduled'])}, preempted {len(entry['preempted'])}, "
            f"still queued {len(entry['still_queued'])}" + (f", counts {entry['counts']}" if "counts" in entry else "")
        )
    return 0


def _check(args: argparse.Namespace) -> int:
    from streams.scenarios.runner import differences, load, run

    files = sorted(args.directory.glob("*.yaml"))
    matched = 0
    for path in files:
        doc = load(path)
        try:
            problems = differences(doc, run(doc))
        except ValueError as exc:
            problems = [f"cannot replay: {exc}"]
        if problems:
            print(f"DIFFERS {path.name}: " + "; ".join(problems))
        else:
            matched += 1
            print(f"ok      {path.name}")
    print(f"{matched}/{len(files)} scenarios match")
    return 0 if matched == len(files) else 1
