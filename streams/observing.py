"""The scrape-time sources of a worker's metrics (`streams.metrics.Observed`), read from its running parts.

Consumer lag and recovery time come from Faust's consumer and recovery service, whose public
interfaces do not expose them; the attributes read here are faust-streaming 0.15.3's.
"""

from __future__ import annotations

import time
from typing import Any, cast

from faust.tables import TableManager
from faust.types import TP

from streams.metrics import AGENT_OF_TOPIC, Lag, Observed
from streams.plane import ControlPlane


def observed(plane: ControlPlane) -> Observed:
    def queue_counts() -> list[dict[str, Any]] | None:
        if not plane.ready:
            return None
        return plane.job_index.group_counts("queue", (), lambda queue: True)

    def lag() -> list[Lag]:
        if not plane.ready:
            return []
        agents = {plane.settings.topic(name): agent for name, agent in AGENT_OF_TOPIC.items()}
        consumer: Any = plane.app.consumer
        found = []
        for tp in sorted(plane.app.assignor.assigned_actives()):
            if not isinstance(tp, TP) or tp.topic not in agents:
                continue
            end = consumer.highwater(tp)
            if end is None:
                continue
            committed = consumer._committed_offset.get(tp)  # the last offset processed, as committed
            found.append(Lag(agents[tp.topic], tp.topic, tp.partition, max(0, end - (0 if committed is None else committed + 1))))
        return found

    def recovery() -> tuple[float | None, bool]:
        service: Any = cast(TableManager, plane.app.tables).recovery
        started, ended = service._recovery_started_at, service._recovery_ended_at
        duration = ended - started if started is not None and ended is not None and ended >= started else None
        return duration, bool(service.in_recovery)

    return Observed(queue_counts=queue_counts, cluster=plane.cluster, lag=lag, recovery=recovery, clock_ms=lambda: int(time.time() * 1000))
