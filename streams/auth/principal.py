"""The caller of an API request, as every entry point (REST, gRPC, CLI) hands it to the operations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    user: str
    groups: tuple[str, ...] = ()
    # True only for the embedded default's unauthenticated caller on 127.0.0.1.
    anonymous: bool = False


ANONYMOUS = Principal(user="anonymous", anonymous=True)
