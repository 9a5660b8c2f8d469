"""Driving a backend by hand in tests: a clock that moves only when told, and one awaitable run to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def run(step: Awaitable[T]) -> T:
    """``step`` awaited in a fresh event loop (``asyncio.run`` wants a coroutine, a backend call may return any awaitable)."""

    async def inside() -> T:
        return await step

    return asyncio.run(inside())
