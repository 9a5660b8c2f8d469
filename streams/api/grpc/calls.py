"""What every servicer needs: who is calling, the operations to hand them to, and the worker's state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import grpc

from streams.api.job_set_log import EventsTopic
from streams.api.operations import Operations
from streams.auth import Authenticator, Principal

AUTHORIZATION = "authorization"


@dataclass
class Api:
    auth: Authenticator
    ops: Operations
    events: EventsTopic
    # Reads are current (tables recovered, no rebalance): what Health answers.
    ready: Callable[[], bool]
    # The worker is stopping: live streams end.
    stopping: Callable[[], bool]

    def caller(self, context: grpc.aio.ServicerContext) -> Principal:
        """The `authorization` metadata (`Bearer <token>`) checked as the REST API checks its header."""
        values = [value for key, value in context.invocation_metadata() or () if key.lower() == AUTHORIZATION]
        # Only `-bin` keys carry bytes; the authorization value is a str.
        return self.auth.authenticate(cast(str, values[0]) if values else None)
