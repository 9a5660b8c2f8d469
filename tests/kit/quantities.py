"""Resource amounts as the scheduler counts them: integer milli-units (a cpu is 1000, a GiB of memory 2**30 * 1000)."""

from __future__ import annotations

CPU = 1000
GI = 2**30 * 1000
