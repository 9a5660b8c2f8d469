"""Log output of the worker and the executor: Faust's text lines, or one JSON object a line (`--log-format json`).

A JSON line has `time` (UTC, ISO 8601), `level`, `logger` and `message`, the exception when there
is one, and the job, run, queue, job set and executor it concerns where the code logging it knows
them: passed as ``extra={"job_id": ...}`` on the call, or fixed for the process (the executor's id).
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time
from collections.abc import Mapping
from typing import Any

LOG_FORMATS = ("text", "json")
FIELDS = ("job_id", "run_id", "queue", "job_set", "executor")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None) or self.static.get(name)
            if value:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def json_logging_config(level: str, static: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A `logging.config.dictConfig` that writes JSON lines to stderr (what Faust's worker takes as ``logging_config``)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "static": dict(static or {})}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"level": level.upper(), "handlers": ["default"]},
    }


def setup_logging(level: str, log_format: str, static: Mapping[str, str] | None = None) -> None:
    """Logging of a process that sets up its own (the executor); the worker hands the config to Faust."""
    if log_format == "json":
        logging.config.dictConfig(json_logging_config(level, static))
    else:
        logging.basicConfig(level=level.upper(), format=_TEXT_FORMAT, stream=sys.stderr)
