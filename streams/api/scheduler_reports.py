"""explain and the scheduler reports as the worker's API answers them (REST and gRPC alike).

The worker reads its own broker's log (`streams.replay.broker.BrokerLog`) in a thread, so a long
read never holds up the event loop, and answers as the command line does from the same log
(`streams.replay.answers`). A job's story needs the caller's watch permission on the job's queue,
a queue's report on that queue; the scheduling report is open to every authenticated caller, like
the cluster view. Cycles the records leave out are recomputed with the worker's own configuration
when the feed does not name one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from streams.api.errors import ApiError
from streams.api.operations import Operations
from streams.auth import Principal
from streams.config import Settings
from streams.replay import answers
from streams.replay.explain import NotFound
from streams.replay.source import LogSource, LogUnavailable
from streams.replay.times import parse_time
from streams.scheduler.config_file import SchedulerConfiguration

T = TypeVar("T")


@dataclass
class SchedulerReports:
    settings: Settings
    configuration: SchedulerConfiguration
    ops: Operations

    @contextmanager
    def _log(self) -> Iterator[LogSource]:
        from streams.replay.broker import BrokerLog

        try:
            with BrokerLog(self.settings) as log:
                yield log
        except NotFound as exc:
            raise ApiError(404, str(exc)) from exc
        except LogUnavailable as exc:
            raise ApiError(503, str(exc)) from exc

    async def _answer(self, question: Callable[[LogSource], T]) -> T:
        def ask() -> T:
            with self._log() as log:
                return question(log)

        return await asyncio.to_thread(ask)

    async def job(self, principal: Principal, job_id: str, replay: bool = True) -> dict[str, Any]:
        await self.ops.job(principal, job_id)
        return await self._answer(lambda log: answers.explain_job(log, job_id, replay=replay, configurations=[self.configuration]))

    async def queue(self, principal: Principal, name: str, cycle_id: str | None, at_ms: int | None) -> dict[str, Any]:
        self.ops.watchable(principal, name)
        return await self._answer(lambda log: answers.queue(log, name, cycle_id, at_ms))

    async def scheduling(self, principal: Principal, cycle_id: str | None, at_ms: int | None) -> dict[str, Any]:
        del principal  # authenticated is enough
        return await self._answer(lambda log: answers.scheduling(log, cycle_id, at_ms))


def parse_at(text: str | None) -> int | None:
    """A cycle's time as a query gives it: epoch ms or ISO 8601 (UTC unless it says otherwise)."""
    try:
        return parse_time(text) if text else None
    except ValueError as exc:
        raise ApiError(400, f"at: {exc}") from exc
