"""The archive's file operations, behind one small interface, so a full disk can be tested without filling one.

The writer only creates files, appends to them, syncs them, cuts them back, renames and removes them.
`OsFiles` does that with the operating system; tests wrap it to make writes fail the way a full
disk (``ENOSPC``) or a read-only file system (``EROFS``) makes them fail, part-way through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class AppendFile(Protocol):
    def write(self, data: bytes) -> None:
        """Append all of ``data`` or raise OSError (possibly after writing part of it)."""
        ...

    def sync(self) -> None: ...

    def truncate(self, size: int) -> None: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class Files(Protocol):
    def append(self, path: Path) -> AppendFile:
        """Open ``path`` for appending, creating it if missing."""
        ...

    def sync_dir(self, path: Path) -> None:
        """Make the directory's entries (files created or removed in it) durable."""
        ...

    def remove(self, path: Path) -> None: ...

    def rename(self, source: Path, target: Path) -> None: ...


class OsAppendFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def sync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)


class OsFiles:
    def append(self, path: Path) -> AppendFile:
        return OsAppendFile(path)

    def sync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)
