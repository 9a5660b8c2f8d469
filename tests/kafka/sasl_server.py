"""The server side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677), for the broker front.

Written for the tests (checked against RFC 7677's example exchange in test_sasl_server.py): Tansu 0.6
cannot be given SCRAM users while it requires authentication, and offers no PLAIN at all, so the
front in tests/kafka/front.py authenticates clients itself. The client side is aiokafka's own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass, field

HASHES: dict[str, Callable[..., hashlib._Hash]] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MECHANISMS = ("PLAIN", *HASHES)


class AuthenticationFailed(Exception):
    """The client's credentials are wrong, or its messages are not the mechanism's."""


@dataclass
class ScramExchange:
    """One SCRAM authentication: `first` answers the client-first message, `final` checks the proof."""

    mechanism: str
    users: dict[str, str]
    iterations: int = 4096
    salt: bytes = field(default_factory=lambda: os.urandom(16))
    server_nonce: str = field(default_factory=lambda: base64.b64encode(os.urandom(18)).decode())
    user: str | None = None
    _auth_message: str = ""
    _salted: bytes = b""
    _nonce: str = ""

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, HASHES[self.mechanism]).digest()

    def first(self, client_first: str) -> str:
        if not client_first.startswith("n,,"):
            raise AuthenticationFailed("channel binding is not offered")
        bare = client_first[3:]
        attributes = dict(part.split("=", 1) for part in bare.split(","))
        user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
        if user not in self.users:
            raise AuthenticationFailed(f"unknown user {user!r}")
        self.user = user
        self._nonce = attributes["r"] + self.server_nonce
        self._salted = hashlib.pbkdf2_hmac(HASHES[self.mechanism]().name, self.users[user].encode(), self.salt, self.iterations)
        server_first = f"r={self._nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
        self._auth_message = f"{bare},{server_first}"
        return server_first

    def final(self, client_final: str) -> str:
        without_proof, _, proof = client_final.rpartition(",p=")
        attributes = dict(part.split("=", 1) for part in without_proof.split(","))
        if attributes.get("r") != self._nonce or attributes.get("c") != "biws":
            raise AuthenticationFailed("the nonce or channel binding differs from the first message's")
        auth_message = f"{self._auth_message},{without_proof}".encode()
        client_key = self._hmac(self._salted, b"Client Key")
        stored_key = HASHES[self.mechanism](client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        claimed = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
        if not hmac.compare_digest(HASHES[self.mechanism](claimed).digest(), stored_key):
            raise AuthenticationFailed(f"wrong password for {self.user!r}")
        server_key = self._hmac(self._salted, b"Server Key")
        return "v=" + base64.b64encode(self._hmac(server_key, auth_message)).decode()


def check_plain(message: bytes, users: dict[str, str]) -> str:
    """The user a PLAIN message authenticates (``authzid NUL authcid NUL password``)."""
    try:
        authorization, user, password = message.decode().split("\0")
    except ValueError as exc:
        raise AuthenticationFailed("not a PLAIN message") from exc
    if authorization not in ("", user) or users.get(user) is None or not hmac.compare_digest(users[user], password):
        raise AuthenticationFailed(f"wrong user or password for {user!r}")
    return user
