"""An executor's settings as administrators set them (Armada's ExecutorSettings): for now its cordon.

A cordon is an `ExecutorSettingsUpserted` event on `events`, the log of record, with no job id and
every executor's under one key (`SETTINGS_QUEUE`/`SETTINGS_JOB_SET`), so that they are folded in the
order they were made. The job-state fold forwards each to the scheduler (`streams.scheduler.feed.
ExecutorSettings`), which gives a cordoned executor's nodes no new job while its runs go on.
"""

from __future__ import annotations

from streams.domain.events import Payload, payload

# The envelope of settings events: no real queue (queue names start with a letter or a digit).
SETTINGS_QUEUE, SETTINGS_JOB_SET = "_executors", "settings"
SETTINGS_KIND = "ExecutorSettingsUpserted"


def settings_payload(executor: str, cordoned: bool, reason: str) -> Payload:
    """The event payload setting ``executor``'s cordon; raises ValueError as Armada's UpsertExecutorSettings
    refuses: an executor needs a name, and a cordon a reason (an uncordon keeps none)."""
    if not executor.strip():
        raise ValueError("must provide non-empty executor name when setting executor settings")
    reason = reason.strip()
    if cordoned and not reason:
        raise ValueError("cordon reason must be specified if cordoning")
    return payload(SETTINGS_KIND, {"executor": executor, "cordoned": cordoned, "cordon_reason": reason if cordoned else ""})
