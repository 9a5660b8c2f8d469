"""JSON log lines carry the fields of what they concern (`--log-format json`)."""

from __future__ import annotations

import json
import logging
import sys

from streams.logs import JsonFormatter


def record(message: str, **extra: object) -> logging.LogRecord:
    entry = logging.LogRecord("flotilla.test", logging.WARNING, __file__, 1, message, (), None)
    entry.__dict__.update(extra)
    return entry


def test_a_json_line_has_the_basics_the_fields_given_and_the_process_fields() -> None:
    line = json.loads(JsonFormatter(static={"executor": "ex1"}).format(record("run %s lost", job_id="J1", run_id="J1-1", queue="q")))
    assert line["level"] == "warning" and line["logger"] == "flotilla.test" and line["time"].endswith("Z")
    assert (line["job_id"], line["run_id"], line["queue"], line["executor"]) == ("J1", "J1-1", "q", "ex1")
    assert "job_set" not in line


def test_an_exception_is_kept_in_the_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        entry = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = json.loads(JsonFormatter().format(entry))
    assert "ValueError: boom" in line["exception"]
