"""A TLS front for the embedded broker, which has no working TLS listener of its own.

Tansu 0.6 takes ``--cert``/``--key`` but refuses the two together and never completes a TLS handshake
with either (checked with Python's ssl module against every combination), so the TLS tests put this
in front of it: it terminates TLS on a port of 127.0.0.1 (with the test CA's server certificate, and,
when asked, requiring a client certificate signed by that CA) and passes the bytes on to Tansu's
plaintext listener. Tansu advertises the proxy's address, so every connection a client makes after
bootstrapping comes back through it. It runs its own event loop on a thread, so it serves
subprocesses (workers, executors) and the test's own clients alike.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from dataclasses import dataclass, field

from tests.kafka.certificates import Certificates


@dataclass
class TlsProxy:
    upstream_port: int
    certs: Certificates
    port: int
    require_client_cert: bool = False
    # The common name of the client certificate of each connection accepted (None: no certificate).
    accepted: list[str | None] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _server: asyncio.Server | None = field(default=None, repr=False)
    _connections: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certs.server_cert, self.certs.server_key)
        if self.require_client_cert:
            context.load_verify_locations(self.certs.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def start(self) -> TlsProxy:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name=f"tls-proxy-{self.port}", daemon=True)
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self._context()), loop)
        self._server = started.result(10)
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        loop.close()

    def __enter__(self) -> TlsProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            peer = writer.get_extra_info("peercert")
            names = [value for rdn in (peer or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
            self.accepted.append(names[0] if names else None)
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            self._connections.discard(task)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()
