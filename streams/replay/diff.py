"""Where two decoded records differ, as lines an operator reads: ``path: recorded X, replayed Y``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_SHOWN = 120  # characters of a value shown


def differences(recorded: Any, replayed: Any, limit: int = 20, names: tuple[str, str] = ("recorded", "replayed")) -> list[str]:
    """The first ``limit`` differences between two decoded records (Avro unions of records as
    ``(name, record)`` tuples, as the codec decodes them); ``names`` call the two sides."""
    found: list[str] = []
    _Walk(found, limit, *names).walk(recorded, replayed, "")
    return found


@dataclass
class _Walk:
    found: list[str]
    limit: int
    a_name: str
    b_name: str

    def walk(self, a: Any, b: Any, path: str) -> None:
        if len(self.found) >= self.limit or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in [*a, *(k for k in b if k not in a)]:
                if key not in b:
                    self.found.append(f"{path}.{key}: {self.a_name} {_show(a[key])}, not {self.b_name}")
                elif key not in a:
                    self.found.append(f"{path}.{key}: not {self.a_name}, {self.b_name} {_show(b[key])}")
                else:
                    self.walk(a[key], b[key], f"{path}.{key}" if path else str(key))
                if len(self.found) >= self.limit:
                    return
            return
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2 and isinstance(a[0], str) and isinstance(b[0], str):
            if a[0] != b[0]:
                self.found.append(f"{path}: {self.a_name} {a[0].rsplit('.', 1)[-1]}, {self.b_name} {b[0].rsplit('.', 1)[-1]}")
            else:
                self.walk(a[1], b[1], f"{path}.{a[0].rsplit('.', 1)[-1]}")
            return
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            for i in range(min(len(a), len(b))):
                self.walk(a[i], b[i], f"{path}[{i}]")
                if len(self.found) >= self.limit:
                    return
            if len(a) != len(b):
                extra = a[len(b) :] if len(a) > len(b) else b[len(a) :]
                side = f"{self.a_name} only" if len(a) > len(b) else f"{self.b_name} only"
                self.found.append(f"{path}: {len(a)} {self.a_name}, {len(b)} {self.b_name}; {side}: {_show(extra)}")
            return
        self.found.append(f"{path}: {self.a_name} {_show(a)}, {self.b_name} {_show(b)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
