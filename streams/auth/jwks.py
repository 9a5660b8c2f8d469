"""The OIDC provider's signing keys (a JWKS document), held in memory and refreshed off the request path.

Callers authenticate from async handlers on the worker's event loop, through a synchronous
`Authenticator`; a network fetch there would stall every agent and request of the worker for as long
as the identity provider takes to answer. So the request path only reads the keys in memory: the
set is fetched once at start-up (a worker whose provider is unreachable refuses to start, with the
reason, rather than refusing every caller later) and then by a background thread, every
`refresh_interval_s` and soon after a token names a key the set does not hold (a rotation). Those
on-demand fetches are at most one per `min_refresh_interval_s`, so tokens with made-up key ids cannot
turn the worker into a load generator against the provider. The token that revealed a rotated key
is refused ("retry shortly"); providers publish a new key before signing with it, so the periodic
refresh usually has it already.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from streams.auth.errors import AuthConfigError

log = logging.getLogger(__name__)

# Key types that verify signatures with a public key; a symmetric ('oct') key in a published key set
# would let anyone who read the set sign tokens, so such keys are ignored.
PUBLIC_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
_MAX_DOCUMENT_BYTES = 1024 * 1024
_SCHEMES = ("http", "https", "file")

JWK = dict[str, Any]


class KeySetError(Exception):
    """The key set could not be fetched or holds no usable signing key."""


def fetch_keys(url: str, timeout_s: float) -> dict[str, JWK]:
    """The signing keys of the JWKS document at ``url`` by key id ('' for a key without one)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # scheme checked by KeySet
            body = response.read(_MAX_DOCUMENT_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise KeySetError(f"cannot fetch {url}: {getattr(exc, 'reason', exc)}") from exc
    if len(body) > _MAX_DOCUMENT_BYTES:
        raise KeySetError(f"{url} is larger than {_MAX_DOCUMENT_BYTES} bytes; not a key set")
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KeySetError(f"{url} is not JSON: {exc}") from exc
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise KeySetError(f"{url} is not a JWKS document: no 'keys' list")
    keys = {
        str(jwk.get("kid", "")): jwk
        for jwk in listed
        if isinstance(jwk, dict) and jwk.get("kty") in PUBLIC_KEY_TYPES and jwk.get("use", "sig") == "sig"
    }
    if not keys:
        raise KeySetError(f"{url} holds no public signing key (RSA, EC or OKP with use 'sig')")
    return keys


@dataclass
class KeySet:
    url: str
    fetch_timeout_s: float = 5.0
    refresh_interval_s: float = 300.0
    min_refresh_interval_s: float = 10.0
    # Replaced whole by the refresh thread, so a reader sees one fetch's keys or the next one's.
    _keys: dict[str, JWK] = field(default_factory=dict, init=False, repr=False)
    _fetched: float = field(default=0.0, init=False, repr=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> KeySet:
        """Fetch the keys now (AuthConfigError if that fails) and keep them fresh from a daemon thread."""
        if urlparse(self.url).scheme not in _SCHEMES:
            raise AuthConfigError(f"OIDC key set URL {self.url!r} must be http://, https:// or file://")
        try:
            self._keys = fetch_keys(self.url, self.fetch_timeout_s)
        except KeySetError as exc:
            raise AuthConfigError(f"OIDC key set: {exc}") from exc
        self._fetched = time.monotonic()
        self._thread = threading.Thread(target=self._refresh_loop, name="oidc-jwks-refresh", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.fetch_timeout_s + 1.0)

    def get(self, kid: str | None) -> JWK | None:
        """The key a token names; a token without a key id may only use a set of exactly one key."""
        keys = self._keys
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def request_refresh(self) -> None:
        """Ask the refresh thread for a fetch as soon as the minimum interval allows; never blocks."""
        self._wake.set()

    @property
    def age_s(self) -> float:
        return time.monotonic() - self._fetched

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_interval_s)
            self._wake.clear()
            if self._stop.wait(max(0.0, self._fetched + self.min_refresh_interval_s - time.monotonic())):
                return
            try:
                self._keys = fetch_keys(self.url, self.fetch_timeout_s)
            except KeySetError as exc:
                # The keys from the last good fetch stay in use: an outage of the provider does not log everyone out.
                log.warning("OIDC key set not refreshed, keeping the previous keys: %s", exc)
            self._fetched = time.monotonic()
