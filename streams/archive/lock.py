"""One owner per directory: an advisory lock (flock) on a file in it that names the owner and its pid.

The kernel drops the lock when its process ends, however it ends (SIGKILL included), so a stale
lock file never keeps the next start out; a second process that finds the lock held is told whose.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class Locked(RuntimeError):
    """The directory is in use; ``pid`` is its owner's (None if it could not be read)."""

    def __init__(self, path: Path, pid: int | None, what: str) -> None:
        owner = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"{path.parent} is in use by {owner} ({what}); stop it first, or use another directory")
        self.pid = pid


class DirLock:
    def __init__(self, directory: Path, what: str, name: str = ".lock") -> None:
        """``what``: the owner as a refused second one is told of it ("flotilla up", ...)."""
        self.path = directory / name
        self.what = what
        self._file: IO[str] | None = None

    def acquire(self) -> DirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for as long as the lock is held
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid, _, what = handle.read().strip().partition(" ")
            handle.close()
            raise Locked(self.path, int(pid) if pid.isdigit() else None, what or "its owner did not say what it is") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {self.what}\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()  # closing the descriptor drops the lock

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
