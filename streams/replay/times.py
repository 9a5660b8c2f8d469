"""Times as people give them to the replay commands and the API (``--since``, ``--at``, ``?at=``), and as they are shown."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: str) -> int:
    """Epoch milliseconds of ``text``: digits are epoch ms; otherwise ISO 8601 (a date, or a date and
    time; UTC when no offset). Raises ValueError saying what is accepted."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a time: give ISO 8601 (2026-01-31, 2026-01-31T12:00:00Z) or epoch milliseconds") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def show_time(ms: int | None) -> str:
    """ISO 8601 in UTC to the millisecond; "-" for none."""
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
