"""Where two decoded records differ, as lines an operator reads: ``path: recorded X, replayed Y``."""

from __future__ import annotations

from typing import Any

MAX_SHOWN = 120  # characters of a value shown


def differences(recorded: Any, replayed: Any, path: str = "", limit: int = 20) -> list[str]:
    """The first ``limit`` differences between two decoded records (Avro unions of records as
    ``(name, record)`` tuples, as the codec decodes them)."""
    found: list[str] = []
    _walk(recorded, replayed, path, found, limit)
    return found


def _walk(a: Any, b: Any, path: str, found: list[str], limit: int) -> None:
    if len(found) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in b:
                found.append(f"{path}.{key}: recorded {_show(a[key])}, not in the replay")
            elif key not in a:
                found.append(f"{path}.{key}: not recorded, replayed {_show(b[key])}")
            else:
                _walk(a[key], b[key], f"{path}.{key}" if path else str(key), found, limit)
            if len(found) >= limit:
                return
        return
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2 and isinstance(a[0], str) and isinstance(b[0], str):
        if a[0] != b[0]:
            found.append(f"{path}: recorded {a[0].rsplit('.', 1)[-1]}, replayed {b[0].rsplit('.', 1)[-1]}")
        else:
            _walk(a[1], b[1], f"{path}.{a[0].rsplit('.', 1)[-1]}", found, limit)
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        for i in range(min(len(a), len(b))):
            _walk(a[i], b[i], f"{path}[{i}]", found, limit)
            if len(found) >= limit:
                return
        if len(a) != len(b):
            extra = a[len(b) :] if len(a) > len(b) else b[len(a) :]
            side = "recorded only" if len(a) > len(b) else "replayed only"
            found.append(f"{path}: {len(a)} recorded, {len(b)} replayed; {side}: {_show(extra)}")
        return
    found.append(f"{path}: recorded {_show(a)}, replayed {_show(b)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
