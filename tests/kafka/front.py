"""A front for the embedded broker that speaks TLS and SASL, which the broker itself cannot here.

Tansu 0.6 takes ``--cert``/``--key`` but refuses the two together and never completes a TLS handshake
with either (checked with Python's ssl module against every combination); its SASL offers no PLAIN,
and SCRAM users cannot be created while it requires authentication (its store is in memory and user
creation needs an authenticated connection). So the tests put this in front of it, on a port of
127.0.0.1: it terminates TLS (the test CA's server certificate, and a client certificate signed by
that CA when asked), and when given users it requires SASL before anything else, as a Kafka broker
does: it answers SaslHandshake and SaslAuthenticate itself (tests/kafka/sasl_server.py: PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) and refuses other requests until the client is authenticated.
ApiVersions, and everything after authentication, go to Tansu's plaintext listener unchanged.
Tansu advertises the front's address, so every connection a client makes after bootstrapping comes
back through it. The front runs its own event loop on a thread, so it serves subprocesses (workers,
executors) and the test's own clients alike.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
from dataclasses import dataclass, field

from tests.kafka.certificates import Certificates
from tests.kafka.sasl_server import MECHANISMS, AuthenticationFailed, ScramExchange, check_plain

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58


@dataclass(frozen=True)
class Accepted:
    """A connection let through: the client certificate's common name and the SASL user, where given."""

    certificate: str | None
    user: str | None


@dataclass
class BrokerFront:
    upstream_port: int
    port: int
    certs: Certificates | None = None  # TLS, with the server certificate signed by certs.ca
    require_client_cert: bool = False
    users: dict[str, str] | None = None  # SASL required, with these users' passwords
    accepted: list[Accepted] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why each SASL authentication failed
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _server: asyncio.Server | None = field(default=None, repr=False)
    _connections: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def _context(self) -> ssl.SSLContext | None:
        if self.certs is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certs.server_cert, self.certs.server_key)
        if self.require_client_cert:
            context.load_verify_locations(self.certs.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def start(self) -> BrokerFront:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name=f"broker-front-{self.port}", daemon=True)
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

    def __enter__(self) -> BrokerFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            peer = writer.get_extra_info("peercert")
            names = [value for rdn in (peer or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
            upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            user = await self._authenticate(reader, writer, upstream) if self.users is not None else None
            if self.users is not None and user is None:
                return
            self.accepted.append(Accepted(names[0] if names else None, user))
            await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()
            self._connections.discard(task)

    async def _authenticate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ) -> str | None:
        """SASL before anything but ApiVersions; the authenticated user, or None once the client is refused."""
        assert self.users is not None
        mechanism: str | None = None
        scram: ScramExchange | None = None
        while True:
            request = await _frame(reader)
            api_key, api_version, correlation = struct.unpack(">hhi", request[:8])
            (client_length,) = struct.unpack(">h", request[8:10])
            body = request[10 + max(client_length, 0) :]
            if api_key == API_VERSIONS:  # passed on: the client learns the broker's versions
                upstream[1].write(_sized(request))
                await upstream[1].drain()
                writer.write(_sized(await _frame(upstream[0])))
                await writer.drain()
            elif api_key == SASL_HANDSHAKE and api_version == 1:
                wanted = _string(body)
                code = 0 if wanted in MECHANISMS else UNSUPPORTED_SASL_MECHANISM
                mechanism = wanted if code == 0 else None
                listed = b"".join(_encode_string(m) for m in MECHANISMS)
                await _answer(writer, correlation, struct.pack(">hi", code, len(MECHANISMS)) + listed)
            elif api_key == SASL_AUTHENTICATE and mechanism is not None and api_version in (0, 1):
                (length,) = struct.unpack(">i", body[:4])
                token = body[4 : 4 + length]
                try:
                    if mechanism == "PLAIN":
                        user, reply = check_plain(token, self.users), b""
                    elif scram is None:
                        scram = ScramExchange(mechanism, self.users)
                        user, reply = None, scram.first(token.decode()).encode()
                    else:
                        user, reply = scram.user, scram.final(token.decode()).encode()
                except (AuthenticationFailed, KeyError, ValueError) as exc:
                    self.refused.append(str(exc))
                    await _answer(writer, correlation, _authenticate_answer(api_version, SASL_AUTHENTICATION_FAILED, str(exc), b""))
                    return None
                await _answer(writer, correlation, _authenticate_answer(api_version, 0, None, reply))
                if user is not None:
                    return user
            else:  # anything else before authentication, as a broker requiring SASL does: the connection is closed
                self.refused.append(f"request {api_key} v{api_version} before authentication")
                return None


def _authenticate_answer(version: int, code: int, message: str | None, token: bytes) -> bytes:
    encoded = struct.pack(">h", -1) if message is None else _encode_string(message)
    answer = struct.pack(">h", code) + encoded + struct.pack(">i", len(token)) + token
    return answer + (struct.pack(">q", 0) if version >= 1 else b"")


async def _frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _answer(writer: asyncio.StreamWriter, correlation: int, body: bytes) -> None:
    writer.write(_sized(struct.pack(">i", correlation) + body))
    await writer.drain()


def _string(data: bytes) -> str:
    (length,) = struct.unpack(">h", data[:2])
    return data[2 : 2 + length].decode()


def _encode_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()
