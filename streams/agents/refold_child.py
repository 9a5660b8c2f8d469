"""While a restored log is refolded into empty tables, the fold runs in a child process beside the worker.

A refold's worker spent ~50 us of CPU per event on one core (bench/restore.py, bench/README.md), about half
of it the pure fold: decoding the event sequences, applying them, the job-index rows, encoding the job
states, feed records and commands. Nothing else reads the tables while the log is refolded (reads are not
current and scheduling is held: `streams.archive.refold`), and the tables start empty (`flotilla up` removes
the worker's data directory before a restore), so the child can hold every job the refold made in a store of
its own (`JobStore` over dicts) and give back only bytes: what each part forwards, its specs, job states and
index rows, all encoded. The worker sends the child its batches of `events` and writes each part the child
gives back (Faust owns the tables and their changelogs) while the child folds the next one: two cores
instead of one.

The child folds exactly as the worker would (`job_state.PartFold`, `sent`, `index_writes`, `JobStore.encoded`
and `new_specs`): the same bytes in the same order (tests/agents/test_refold_child.py). It is started with
the refold and stopped when the refold has caught up, when the agent stops or fails (its connection closed:
the child ends on end of input), and with the worker (the child's end of the pipe closes with it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from socket import SHUT_RDWR, SO_RCVBUF, SO_SNDBUF, SOL_SOCKET, socketpair
from typing import Any, NamedTuple

from streams.agents.job_state import FoldedPart, PartFold, sent
from streams.archive.refold import active_runs
from streams.domain.job_index import JobIndex
from streams.gc_tuning import tune_for_long_lived_state
from streams.tables.job_index import index_writes
from streams.tables.jobs import JobStore

log = logging.getLogger(__name__)

# Socket buffers of the pipe between the worker and the child (capped by the kernel's net.core.[rw]mem_max): a
# part is a few MB, and the child waits on a full buffer until the worker's thread reads it.
PIPE_BUFFER_BYTES = 4 << 20
# Seconds the worker waits for its child to end once told to, before killing it.
STOP_WAIT_S = 5.0


class Raw(NamedTuple):
    """An `events` message as the child gets it: what the fold reads of a Faust message."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


@dataclass
class RefoldedPart:
    """A part folded by the child, as the worker writes it: how many of the batch's messages it holds (the
    parts of a batch are its messages in order), how their events went, the feed records and commands it
    sends, the job-index puts, the new specs and the job states (each (partition, key, bytes)), and each
    forwarded job's active run (`active_runs`) for the refold gate; and how many jobs the child holds after it (its
    memory: `job_state.REFOLD_CHILD_MOST_JOBS`)."""

    messages: int
    outcomes: Counter[str]
    records: list[bytes]
    commands: list[tuple[bytes, bytes]]
    rows: list[tuple[int, str, bytes]]
    specs: list[tuple[int, str, bytes]]
    states: list[tuple[int, str, bytes]]
    active: list[tuple[str, str | None]]
    held: int


@dataclass
class ChildFold:
    """The child's side: the jobs the refold made so far and their index rows, held as the tables would hold them."""

    part_max: int
    # Dicts stand in for the tables (the store reads them as mappings): job id -> state bytes, job id -> spec message.
    jobs: JobStore = field(default_factory=lambda: JobStore(table={}, specs={}))  # type: ignore[arg-type]
    index: JobIndex = field(default_factory=lambda: JobIndex.of([], []))

    def batch(self, messages: Sequence[Raw]) -> Iterator[RefoldedPart]:
        """Fold a batch's messages in parts of about ``part_max`` job events, as `job_state.fold_batch` does, each part
        written and given as soon as it is folded: the worker writes it while the next one is folded. (Given as a
        list once the whole batch was folded, the worker wrote a batch's 20 parts only then, while the child
        waited: 1.5-1.8 s at each batch end, ~7 s of a 40 s refold at 1M events, bench/restore.py.)"""
        folding = PartFold(self.jobs, self.part_max)
        for message in messages:
            part = folding.add(message)  # type: ignore[arg-type]  # a Raw has what the fold reads of a Message
            if part is not None:
                yield self.written(part)
        part = folding.rest()
        if part is not None:
            yield self.written(part)

    def written(self, part: FoldedPart) -> RefoldedPart:
        """What the worker's `job_state.register.write` would send and write for ``part``, encoded, and held here as written."""
        jobs, index = self.jobs, self.index
        writes = jobs.hand_over()
        records, commands = sent(part)
        rows, held_rows, held_requests = index_writes(index.rows.get, index.requests, writes.listed(), part.events, part.requests)
        specs = jobs.new_specs(writes)
        states = jobs.encoded(writes)
        for row in held_rows:
            index.rows[row.job_id] = row
        index.requests.update(held_requests)
        for _, job_id, raw in specs:
            jobs.specs[job_id] = raw
        for _, job_id, raw in states:
            jobs.table[job_id] = raw
        jobs.written(writes)
        return RefoldedPart(
            len(part.messages), part.outcomes, records, commands, rows, specs, states, active_runs(part.changes), len(jobs.table)
        )


def serve(connection: Connection, part_max: int) -> None:
    """The child's loop: a batch of messages in, its parts out, then None; until the worker closes the connection."""
    tune_for_long_lived_state()
    fold = ChildFold(part_max)
    try:
        while True:
            messages = connection.recv()
            for part in fold.batch([Raw(*message) for message in messages]):
                connection.send(part)
            connection.send(None)
    except (EOFError, OSError):  # the worker shut its end: the refold is over (or the agent stopped)
        return


class RefoldChild:
    """The worker's side: the child process, a batch sent at a time, its parts read as they come (a thread reads
    the pipe, so the worker writes one part while the child folds the next)."""

    def __init__(self, part_max: int) -> None:
        ours, theirs = socketpair()
        for end in (ours, theirs):
            end.setsockopt(SOL_SOCKET, SO_SNDBUF, PIPE_BUFFER_BYTES)
            end.setsockopt(SOL_SOCKET, SO_RCVBUF, PIPE_BUFFER_BYTES)
        self._socket = ours  # shut down to stop: closing the connection would not wake the thread reading it
        self._connection = Connection(os.dup(ours.fileno()))
        fd = theirs.fileno()
        self._process = subprocess.Popen([sys.executable, "-m", "streams.agents.refold_child", str(fd), str(part_max)], pass_fds=[fd])
        theirs.close()
        self._parts: asyncio.Queue[RefoldedPart | None | BaseException] = asyncio.Queue()
        self._batch_ended = False  # `parts` gave the batch's last parts: the next call gives none
        loop = asyncio.get_running_loop()
        self._reader = threading.Thread(target=self._read, args=(loop,), name="refold-child-reader", daemon=True)
        self._reader.start()
        log.info("refolding in child process %d", self._process.pid)

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand each part the child sends to the event loop; on end of input (the child ended, or `stop`), the error."""
        while True:
            try:
                part: RefoldedPart | None | BaseException = self._connection.recv()
            except (EOFError, OSError) as exc:
                part = exc
            try:
                loop.call_soon_threadsafe(self._parts.put_nowait, part)
            except RuntimeError:  # the loop is closed: nobody waits for parts any more
                return
            if isinstance(part, BaseException):
                return

    def send(self, messages: Sequence[Any]) -> None:
        """Give the child a batch of Faust messages to fold; its parts follow (`next`), then None."""
        self._connection.send([(m.topic, m.partition, m.offset, m.value) for m in messages])

    async def next(self) -> RefoldedPart | None:
        """The batch's next part, or None after its last. Raises when the child ended."""
        part = await self._parts.get()
        if isinstance(part, BaseException):
            raise RuntimeError(f"the refold's child process ended (exit status {self._process.poll()})") from part
        return part

    async def parts(self) -> list[RefoldedPart]:
        """The batch's next parts: every one the child has given so far (waiting for the first), none after its
        last. Raises when the child ended."""
        if self._batch_ended:
            self._batch_ended = False
            return []
        found: list[RefoldedPart] = []
        while (part := await self.next()) is not None:
            found.append(part)
            if self._parts.empty():
                return found
        self._batch_ended = bool(found)  # its end came with these: the next call says so
        return found

    def stop(self) -> None:
        """End the child without holding the event loop: its connection shut down, it ends at once (on end of
        input, or on a broken pipe mid-batch); a thread waits for it and kills it if it has not within `STOP_WAIT_S`."""
        self._socket.shutdown(SHUT_RDWR)
        self._socket.close()
        self._connection.close()
        threading.Thread(target=self._reap, name="refold-child-reaper", daemon=True).start()

    def _reap(self) -> None:
        try:
            self._process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        log.info("refold child process %d ended (exit status %s)", self._process.pid, self._process.returncode)


if __name__ == "__main__":
    # The module's own classes, not __main__'s: the parts are pickled by name for the worker.
    from streams.agents import refold_child

    refold_child.serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
