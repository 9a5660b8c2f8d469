"""Frozen dataclasses made without their own __init__, for the hot paths that make many.

A frozen dataclass's __init__ sets each field through ``object.__setattr__``: a JobDelta of 24
fields took 7 of the 11 us a feed row took to read, and a scheduler's Job of 10 fields 3.5 us (a
replay makes one per job and row, a million of each per million events). `maker` makes an
instance instead as one of a twin class of the very same slots whose __init__ assigns them plainly,
then assigns it the dataclass as its class, which Python allows between classes of one layout.
That is all the dataclass's own __init__ does when it has no __post_init__ and every field is set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def maker(cls: type[T], order: Sequence[str] | None = None) -> Callable[..., T]:
    """A function making ``cls`` (a frozen dataclass with slots) from every field, given by name or
    positionally in ``order`` (default: the fields' own order), as ``cls(...)`` would."""
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    order = tuple(order or names)
    slots = getattr(cls, "__slots__", None)
    if slots is None or sorted(slots) != sorted(names) or sorted(order) != sorted(names) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} is not a dataclass with slots whose every field is set by its __init__ alone")
    source = f"class Plain:\n    __slots__ = {tuple(slots)!r}\n    def __init__(self, {', '.join(order)}):\n" + "".join(
        f"        self.{name} = {name}\n" for name in order
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # the source is made just above, from the dataclass's own field names
    plain = namespace["Plain"]

    def make(*args: Any, **kwargs: Any) -> T:
        made = plain(*args, **kwargs)
        made.__class__ = cls
        return made

    make.__doc__ = f"A {cls.__name__} of every field, in the order {', '.join(order)}."
    return make
