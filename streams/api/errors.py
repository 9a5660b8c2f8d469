"""The one refusal type of the API, shared by REST and gRPC.

A refusal is raised as `ApiError` wherever it is found; its HTTP status doubles as the kind of
refusal, which REST answers as is and the gRPC layer maps to a status code.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
