"""The caller of an API request, as every entry point (REST, gRPC, CLI) hands it to the operations."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    user: str
    groups: tuple[str, ...] = ()
    # True only for the embedded default's unauthenticated caller on 127.0.0.1.
    anonymous: bool = False
    # The `Authorization` value the caller was authenticated from: a call another worker answers
    # carries it, so that worker checks the caller itself. Not part of who the caller is.
    credentials: str | None = field(default=None, compare=False, repr=False)


ANONYMOUS = Principal(user="anonymous", anonymous=True)
