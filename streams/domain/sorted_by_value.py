"""Keys (value, job id) in sorted order, held as per value the ids of its jobs.

The job index keeps its lists in priority order (`streams.domain.job_index`) as keys of a priority and
a job id. Most jobs share their priority with many others: a (value, id) tuple per job cost 56 bytes
of the ~470 a queued job held there, where an id in its value's list costs a slot. The keys are made
again as a walk reaches them. A value with one job holds its id alone (a sorted list of one is ~430
bytes), so jobs of distinct priorities cost about what their tuples did.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sortedcontainers import SortedList

Key = tuple[Any, str]


class SortedByValue:
    """What `SortedList` of (value, job id) keys offers the job index (add, remove, len, iteration, irange
    with an inclusive low and an exclusive high), in the same order. Values must be totally ordered
    and equal values interchangeable (the index's priorities are floats)."""

    __slots__ = ("_values", "_ids", "_len")

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        groups: dict[Any, list[str]] = {}
        for value, job_id in keys:
            groups.setdefault(value, []).append(job_id)
        self._values = SortedList(groups)
        self._ids: dict[Any, str | SortedList] = {value: ids[0] if len(ids) == 1 else SortedList(ids) for value, ids in groups.items()}
        self._len = sum(map(len, groups.values()))

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Key]:
        return self.irange(None, None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SortedByValue) and len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SortedByValue({list(self)!r})"

    def add(self, key: Key) -> None:
        value, job_id = key
        held = self._ids.get(value)
        if held is None:
            self._ids[value] = job_id
            self._values.add(value)
        elif type(held) is str:
            self._ids[value] = SortedList((held, job_id))
        else:
            held.add(job_id)  # type: ignore[union-attr]
        self._len += 1

    def remove(self, key: Key) -> None:
        """Raises ValueError when ``key`` is not held."""
        value, job_id = key
        held = self._ids.get(value)
        if held is None or (type(held) is str and held != job_id):
            raise ValueError(f"{key!r} is not held")
        if type(held) is str:
            del self._ids[value]
            self._values.remove(value)
        else:
            held.remove(job_id)  # type: ignore[union-attr]
            if len(held) == 1:
                self._ids[value] = held[0]
        self._len -= 1

    def irange(
        self, minimum: Key | None, maximum: Key | None, inclusive: tuple[bool, bool] = (True, False), reverse: bool = False
    ) -> Iterator[Key]:
        """The keys from ``minimum`` (inclusive) to ``maximum`` (exclusive), None for no bound, as tuples compare."""
        if inclusive != (True, False):
            raise ValueError("only an inclusive low and an exclusive high are offered")
        low = None if minimum is None else minimum[0]
        high = None if maximum is None else maximum[0]
        for value in self._values.irange(low, high, reverse=reverse):
            held = self._ids[value]
            first = minimum[1] if minimum is not None and value == low else None
            last = maximum[1] if maximum is not None and value == high else None
            if type(held) is str:
                if (first is None or held >= first) and (last is None or held < last):
                    yield (value, held)
            else:
                for job_id in held.irange(first, last, inclusive=(True, False), reverse=reverse):  # type: ignore[union-attr]
                    yield (value, job_id)
