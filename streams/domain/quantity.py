"""Kubernetes resource quantities ("500m", "4Gi", "1e3") as exact integers.

Every resource is held in milli-units (1 cpu = 1000, 1 byte of memory = 1000) so that
cpu, memory and extended resources share one integer arithmetic with no float drift,
which keeps scheduling decisions byte-for-byte reproducible.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

_QUANTITY = re.compile(r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity exactly; numbers are accepted for YAML convenience."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, (int, float)):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. '500m', '2', '4Gi')")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{text!r} is not a quantity") from exc
    if match["exp"]:
        return number * (Decimal(10) ** int(match["exp"][1:]))
    return number * _SUFFIXES[match["suffix"] or ""]


@lru_cache(maxsize=4096, typed=True)
def to_milli(text: str | int | float) -> int:
    """Quantity in milli-units, rounded up as Kubernetes rounds requests.

    Memoised: the same few quantity strings recur in every job of a batch, and this sits on the
    ingest and scheduling hot paths. Typed: True equals 1.0, but only 1.0 is a quantity.
    """
    return int((parse_quantity(text) * 1000).to_integral_value(rounding=ROUND_CEILING))
