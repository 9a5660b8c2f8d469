"""Equal values shared between the jobs a worker holds in memory instead of held once per job.

A million queued jobs mostly ask for a handful of shapes: the same requests, node selector,
tolerations and gang annotations, in a few queues, job sets and priority classes. Decoded one by
one, each job held its own copy of every string, dict and tuple: about 1 KiB per job in the
scheduler's index, and a few hundred bytes in the job query index (`streams.domain.job_index`).
`shared` hands out one object per distinct value instead. The table is bounded: a value evicted
from it stays valid wherever it is held, it is only no longer handed out again, so a flood of
distinct shapes costs what it did before and no more.

The shared values must never be mutated: the index treats a job's fields as immutable (its
records are frozen dataclasses), and so does the algorithm.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from typing import Any, TypeVar, cast

T = TypeVar("T")

# Distinct values remembered; far above the shapes a real workload has, far below one per job.
SIZE = 8192

_values: OrderedDict[Any, Any] = OrderedDict()
# Floats, apart from the other values (see `shared`): by their `float.hex` text.
_FLOATS: dict[str, Any] = {}
# Marks the keys of tuples of text pairs, apart from every key `_frozen` makes (whose first item is a type).
_TEXT_PAIRS = object()


def shared(value: T) -> T:
    """The one object standing for every value equal to ``value`` (dicts, lists, tuples, numbers, text)."""
    if isinstance(value, str):
        return cast(T, sys.intern(value))
    if isinstance(value, float):
        # A job's priority, in every delta and row read: a table of its own, keyed by the float's exact text
        # (-0.0 apart from 0.0), cheaper than `_frozen`'s key or a tuple with its sign (a sixth of reading a feed row).
        return cast(T, remembered(_FLOATS, value.hex(), value, SIZE))
    if type(value) is tuple and _text_pairs(cast(tuple[Any, ...], value)):
        # Pairs of text (a job's labels, in every job query row): text equals only text, so the tuple is its
        # own key; `_frozen`'s walk cost ~8 us a row.
        key: Any = (_TEXT_PAIRS, value)
    else:
        try:
            key = _frozen(value)
        except TypeError:  # an unhashable leaf: kept as it is
            return value
    found = _values.get(key)
    if found is not None:
        return cast(T, found)
    _values[key] = value
    if len(_values) > SIZE:
        _values.popitem(last=False)
    return value


def remembered(table: dict[Any, T], key: Any, value: T, size: int) -> T:
    """The value ``table`` holds for ``key``, else ``value``, held from now on. ``table`` forgets all it held
    when it reaches ``size``: for values that come in runs (the jobs of a request), where a few recent ones
    are all that is shared, and looked up once per job (cheaper than `shared`'s ordered table)."""
    known = table.get(key)
    if known is None:
        if len(table) >= size:
            table.clear()
        known = table[key] = value
    return known


# Times (epoch ms) as one object each: the jobs of one submit request (a hundred, a thousand) share their
# submission time, and each index holds one per queued job. They come together, so a few are remembered.
_TIMES: dict[int, int] = {}
TIMES_SIZE = 1024


def shared_time(value: int) -> int:
    """The one int object for ``value`` among those read lately (anything but an int as it is)."""
    return value if type(value) is not int else remembered(_TIMES, value, value, TIMES_SIZE)


def shared_priority(value: float) -> float:
    """``float(value)``, one object for equal priorities (`shared`): each job's own was 24 bytes of a row, and most
    jobs share theirs; 0.0 and -0.0, which a row writes apart, stay apart."""
    return shared(float(value))


def _text_pairs(value: tuple[Any, ...]) -> bool:
    return all(type(pair) is tuple and len(pair) == 2 and type(pair[0]) is type(pair[1]) is str for pair in value)


def text(value: str | None) -> str | None:
    return None if value is None else sys.intern(value)


def _frozen(value: Any) -> Any:
    """A hashable key equal for equal values and unequal across types (1 and 1.0 and True differ).

    A dict's key order is part of its key: two equal dicts in another order stay apart, so a shared
    value encodes (to JSON, say) exactly as the value it replaces."""
    if isinstance(value, dict):
        return (dict, tuple((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_frozen(v) for v in value))
    if isinstance(value, float):  # -0.0 equals 0.0 but is written apart
        return (float, value, math.copysign(1.0, value))
    hash(value)
    return (type(value), value)
