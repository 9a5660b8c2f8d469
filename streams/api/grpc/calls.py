"""What every servicer needs from a call: who is calling, and the operations to hand them to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from streams.api.operations import Operations
from streams.auth import Principal

if TYPE_CHECKING:
    from streams.app import ControlPlane

AUTHORIZATION = "authorization"


@dataclass
class Api:
    plane: ControlPlane
    ops: Operations

    def caller(self, context: grpc.aio.ServicerContext) -> Principal:
        """The `authorization` metadata (`Bearer <token>`) checked as the REST API checks its header."""
        values = [value for key, value in context.invocation_metadata() or () if key.lower() == AUTHORIZATION]
        return self.plane.auth.authenticate(values[0] if values else None)
