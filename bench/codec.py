"""Codec benchmark: microseconds per record for the encodings and decodings on the hot path.

The records are the ones the ingest benchmark submits (one container, cpu/memory requests, a client
id), built by the same domain code the worker runs:

- ``job_state``: a queued job's state (its spec apart); encoded validated (as the API does) and
  unvalidated (as the fold does), and decoded;
- ``job_submitted``: the job's spec, as job-specs stores it: encoded and decoded (keeping its bytes,
  as the jobs table reads it); and a lease command, whose spec (read keeping its bytes) is copied in;
- ``event_sequence``: one JobSubmitted event (what ingest writes per job) and a JobRunRunning one;
- ``submit_request``: a request of 100 items (per request, and per item).

Each figure is the median of ``--rounds`` timed loops of ``--records`` calls (after one warm-up
loop), in process CPU time (``time.process_time``): on a shared machine wall time mostly measures the
neighbours. No process is started.

Usage: .venv/bin/python bench/codec.py [--records 5000] [--rounds 5]
The last stdout line is one JSON object of µs per record.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.ingest import JOB_SET, raw_item  # noqa: E402
from schemas import codec  # noqa: E402
from streams.domain import jobspec  # noqa: E402
from streams.domain.jobs import apply_event  # noqa: E402
from streams.domain.validation import SubmitPolicy, validate_item  # noqa: E402
from streams.scheduler.commands import executor_command  # noqa: E402

ULID = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
NOW_MS = 1_760_000_000_000
ENVELOPE = {"queue": "bench-0", "job_set_id": JOB_SET, "user": "anonymous", "groups": []}


def submitted_payload() -> dict[str, Any]:
    job, reason = validate_item(jobspec.job_item(raw_item(0)), SubmitPolicy())
    assert job is not None, reason
    return job


def job_state() -> dict[str, Any]:
    """The job as the fold holds it: its state, and its spec under ``spec`` (which job_state leaves out)."""
    event = {"event_id": ULID, "created": NOW_MS, "job_id": ULID, "payload": ("flotilla.JobSubmitted", submitted_payload())}
    state = apply_event(None, "flotilla.JobSubmitted", event, ENVELOPE)
    assert state is not None
    return state


def lease(state: dict[str, Any]) -> dict[str, Any]:
    run = {"run_id": f"{ULID}-1", "executor": "bench-executor", "node": "node-1", "leased_at": NOW_MS}
    return executor_command(state, {**state, "state": "leased", "runs": [run]}, ULID, NOW_MS) or {}


def sequence(payload: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {**ENVELOPE, "events": [{"event_id": ULID, "created": NOW_MS, "job_id": ULID, "payload": payload}]}


def submit_request(items: int) -> dict[str, Any]:
    return {**ENVELOPE, "request_id": "bench", "items": [jobspec.job_item(raw_item(i)) for i in range(items)]}


def per_call_us(call: Callable[[], Any], records: int, rounds: int) -> float:
    for _ in range(records):
        call()
    timings = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(records):
            call()
        timings.append((time.process_time() - start) / records * 1e6)
    return statistics.median(timings)


def cases() -> dict[str, Callable[[], Any]]:
    state = job_state()
    state_bytes = codec.encode("job_state", state)
    spec_bytes = codec.encode("job_submitted", state["spec"])
    kept = codec.decode("job_submitted", spec_bytes, keep="flotilla.JobSubmitted")
    command = {**lease(state), "spec": kept}
    submitted = sequence(("flotilla.JobSubmitted", submitted_payload()))
    running = sequence(("flotilla.JobRunRunning", {"run_id": f"{ULID}-1", "node": "node-1"}))
    submitted_bytes = codec.encode("event_sequence", submitted)
    running_bytes = codec.encode("event_sequence", running)
    request = submit_request(100)
    request_bytes = codec.encode("submit_request", request)
    return {
        "job_state_encode_validated": lambda: codec.encode("job_state", state),
        "job_state_encode": lambda: codec.encode("job_state", state, validate_record=False),
        "job_state_decode": lambda: codec.decode("job_state", state_bytes),
        "job_submitted_encode": lambda: codec.encode("job_submitted", state["spec"], validate_record=False),
        "job_submitted_decode": lambda: codec.decode("job_submitted", spec_bytes, keep="flotilla.JobSubmitted"),
        "lease_command_encode": lambda: codec.encode("executor_command", command, validate_record=False),
        "event_submitted_encode": lambda: codec.encode("event_sequence", submitted, validate_record=False),
        "event_submitted_decode": lambda: codec.decode("event_sequence", submitted_bytes),
        "event_running_encode": lambda: codec.encode("event_sequence", running, validate_record=False),
        "event_running_decode": lambda: codec.decode("event_sequence", running_bytes),
        "submit_request_100_encode": lambda: codec.encode("submit_request", request),
        "submit_request_100_decode": lambda: codec.decode("submit_request", request_bytes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()}, {args.rounds} rounds of {args.records} records, median CPU µs per record")
    figures: dict[str, float] = {}
    for name, call in cases().items():
        records = max(1, args.records // 100) if name.startswith("submit_request_100") else args.records
        figures[name] = round(per_call_us(call, records, args.rounds), 2)
        print(f"{name:32} {figures[name]:10.2f} µs")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
