"""Signing keys and a real JWKS endpoint for OIDC tests: an HTTP server on 127.0.0.1 in a thread.

The served key set can be changed while it runs (key rotation) and counts the fetches, so tests can
show that verification reads keys from memory rather than from the network.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://idp.example.test"
AUDIENCE = "flotilla"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    algorithm: str
    # The "alg" the key set declares for the key (None: it declares none).
    declared_alg: str | None = None

    def jwk(self) -> dict[str, Any]:
        if isinstance(self.private, rsa.RSAPrivateKey):
            public = RSAAlgorithm.to_jwk(self.private.public_key())
        else:
            public = ECAlgorithm.to_jwk(self.private.public_key())
        declared = {} if self.declared_alg is None else {"alg": self.declared_alg}
        return {**json.loads(public), "kid": self.kid, "use": "sig", **declared}

    def sign(self, claims: dict[str, Any], kid: str | None = None) -> str:
        """A token for ``claims`` (exp, iss and aud filled in unless given), naming ``kid`` (default: this key's)."""
        full = {"exp": int(time.time()) + 300, "iss": ISSUER, "aud": AUDIENCE, **claims}
        return jwt.encode(full, self.private, algorithm=self.algorithm, headers={"kid": kid or self.kid})


def rsa_key(kid: str) -> SigningKey:
    return SigningKey(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")


@dataclass
class JwksServer:
    keys: list[SigningKey]
    # None: serve the keys; otherwise answer every fetch with this HTTP status (a provider outage).
    failing_status: int | None = None
    fetches: int = 0
    _server: ThreadingHTTPServer | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}/jwks.json"

    def document(self) -> dict[str, Any]:
        return {"keys": [key.jwk() for key in self.keys]}

    def __enter__(self) -> JwksServer:
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.fetches += 1
                if served.failing_status is not None:
                    self.send_error(served.failing_status)
                    return
                body = json.dumps(served.document()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
