"""Every process a benchmark starts ends with it: on a normal exit, an error, Ctrl-C (SIGINT) or SIGTERM.

    with Children(log) as children:
        broker = children.add(EmbeddedBroker(new_session=True))
        broker.start()
        worker = children.add(WorkerProcess(..., new_session=True))
        worker.start()
        spy = children.add(Command([py_spy, "record", ...], stop_signal=signal.SIGINT)).start()
    ...
    except KeyboardInterrupt:
        return exit_status()  # 130 after SIGINT, 143 after SIGTERM

A child is registered before it starts, so one interrupted while starting is stopped too. Leaving
the block stops the children in reverse order (workers and executors before the broker they talk
to), each by its own stop() (ops/: SIGTERM, a grace period, SIGKILL) through `stop()` below, which
then kills what is left of the child's process group: the children run in sessions of their own,
so their own children (a broker binary started by a launcher script) are in that group. Last, any
process still descended from the benchmark is killed: the benchmark is made a child subreaper, so
orphaned grandchildren are re-parented to it rather than to init and are found there too. SIGINT
and SIGTERM are ignored meanwhile, so a second Ctrl-C does not cut the cleanup short.

Inside the block SIGINT raises KeyboardInterrupt even when the benchmark was started in the
background (where the shell has it ignored), and SIGTERM is turned into a SIGINT, so that
asyncio.run cancels the running phase (its finally blocks close the clients) and then raises
KeyboardInterrupt as well. (SIGINT's handler must be `signal.default_int_handler` itself: only then
does asyncio.run install its cancelling one.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol, TypeVar

from ops import child

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>

_received: int | None = None  # SIGTERM once one was turned into KeyboardInterrupt (SIGINT is asyncio's own handler's)


class Child(Protocol):
    """What ops/ launchers (EmbeddedBroker, WorkerProcess, ExecutorProcess) and Command have in common."""

    @property
    def process(self) -> subprocess.Popen[bytes] | None: ...

    def stop(self) -> None: ...


C = TypeVar("C", bound=Child)


@dataclass
class Command:
    """A plain subprocess (py-spy, a worker script) in a session of its own: stop() sends ``stop_signal``
    (py-spy writes its output on SIGINT), then SIGKILL after ``grace_s``."""

    args: Sequence[str]
    stop_signal: int = signal.SIGTERM
    grace_s: float = 10.0
    cwd: Path | None = None
    stdout: int | IO[Any] | None = subprocess.DEVNULL
    stderr: int | IO[Any] | None = None  # None: the benchmark's own stderr
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> Command:
        self.process = subprocess.Popen(
            list(self.args), cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stderr, start_new_session=True
        )
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            child.stop(self.process, self.grace_s, self.stop_signal)


def _log(message: str) -> None:
    print(f"[processes] {message}", file=sys.stderr, flush=True)


def _own_group(process: subprocess.Popen[bytes] | None) -> int | None:
    """The process group the child leads, asked while it is still unreaped (so its pid is still ours);
    None when it is gone or shares the benchmark's group."""
    if process is None or process.poll() is not None:
        return None
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        return None
    return group if group == process.pid and group != os.getpgrp() else None


def stop(process: Child, log: Callable[[str], None] = _log) -> None:
    """Stop one child by its own stop(), then SIGKILL whatever is left of the process group it leads."""
    popen = process.process
    group = _own_group(popen)
    try:
        process.stop()
    except Exception as exc:  # noqa: BLE001 - the child is killed instead, and the others still get stopped
        log(f"could not stop pid {popen.pid if popen else '?'} ({exc!r}): killing it")
        if popen is not None and popen.poll() is None:
            popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(10)
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
            log(f"killed what was left of process group {group}")


def exit_status() -> int:
    """The benchmark's exit status after an interruption: 128 + the signal (SIGINT when none was recorded)."""
    return 128 + (_received or signal.SIGINT)


def _sigterm(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signum
    os.kill(os.getpid(), signal.SIGINT)


def _become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process instead of init, so the final sweep finds them."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _descendants(root: int) -> list[tuple[int, int, str]]:
    """(pid, parent pid, state) of every process below ``root``, from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), fields[0]))
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        for pid, state in children.get(parent, []):
            found.append((pid, parent, state))
            todo.append(pid)
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def sweep(log: Callable[[str], None] = _log) -> None:
    """SIGKILL every process still descended from this one and reap the ones that are its children."""
    for _ in range(20):
        left = _descendants(os.getpid())
        living = [pid for pid, _, state in left if state != "Z"]
        for pid in living:
            log(f"killing leftover pid {pid}: {_command_line(pid)}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while True:  # reap: killed children, and orphans re-parented to this subreaper
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not left:
            return
        time.sleep(0.1)
    log(f"processes left after the sweep: {[pid for pid, _, _ in _descendants(os.getpid())]}")


class Children:
    """The processes a benchmark started, stopped when the block ends however it ends (see the module doc)."""

    def __init__(self, log: Callable[[str], None] = _log) -> None:
        self.log = log
        self._children: list[Child] = []
        self._saved: dict[int, Any] = {}

    def add(self, process: C) -> C:
        """Register a child before starting it; returns it."""
        self._children.append(process)
        return process

    def stop_all(self) -> None:
        """Stop every registered child (last registered first) and sweep; signals wait until it is done."""
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            while self._children:
                stop(self._children.pop(), self.log)
            sweep(self.log)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def __enter__(self) -> Children:
        _become_subreaper()
        self._saved = {
            signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
            signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm),
        }
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_all()
        finally:
            for signum, handler in self._saved.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def py_spy_recording(
    children: Children,
    py_spy: str,
    pid: int,
    out: str,
    *,
    threads: bool = False,
    gil: bool = False,
    log: Callable[[str], None] = _log,
) -> Iterator[None]:
    """py-spy records ``pid`` into ``out`` (`--format raw`, folded stacks; every thread if ``threads``; only the
    thread holding the GIL if ``gil``) for as long as the block runs; registered with ``children`` so that an
    error still stops it."""
    command = [py_spy, "record", "--format", "raw", "-o", out, "--pid", str(pid), "--rate", "100", "--nonblocking"]
    command += (["--threads"] if threads else []) + (["--gil"] if gil else [])
    spy = children.add(Command(command, stop_signal=signal.SIGINT, grace_s=60.0)).start()
    time.sleep(1.0)  # let it attach before the block starts
    try:
        yield
    finally:
        spy.stop()  # py-spy writes its output on SIGINT
        log(f"profile: {out}")
