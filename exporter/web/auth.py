"""Basic auth against `basic_auth_users` (bcrypt hashes), with exporter-toolkit's cache.

A bcrypt check costs tens of milliseconds by design; a scraper sends the same credentials
every few seconds. As upstream, the outcome of each (user, hash, password) check is cached
in a small table with random eviction, so a scrape pays bcrypt once, and only one bcrypt
check runs at a time. Unlike upstream the table is keyed by a keyed digest, never by the
password: the plaintext is not kept, and a lookup compares digests, not secrets. An unknown
user costs a bcrypt check against a decoy hash, so timing does not tell which users exist.
`bcrypt` is imported on the first check, so a server without users never loads it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import random
import secrets
from collections.abc import Mapping

CACHE_SIZE = 100
"""Entries kept, as upstream; a tenth is evicted at random when full."""
_DECOY_HASH = b"$2b$10$" + b"C" * 53
"""Well-formed, matches no password: the work an unknown user's check costs."""


def parse_basic(header: str) -> tuple[str, str] | None:
    """Return the user and password of an `Authorization: Basic ...` value, or None when it holds
    none."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


class BasicAuth:
    """Checks credentials against one `basic_auth_users` table."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {name: hashed.encode() for name, hashed in users.items()}
        self._key = secrets.token_bytes(32)
        """Digests are keyed per process, so the cache's keys say nothing outside it."""
        self._verified: dict[bytes, bool] = {}
        self._bcrypt_turn = asyncio.Lock()
        self.bcrypt_checks = 0
        """How many checks paid bcrypt (a scrape with cached credentials does not)."""

    async def check(self, authorization: str | None) -> bool:
        """Return whether the header carries the credentials of a configured user."""
        credentials = parse_basic(authorization) if authorization else None
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        digest = self._digest(user, hashed or _DECOY_HASH, password)
        cached = self._verified.get(digest)
        if cached is None:
            async with self._bcrypt_turn:  # bcrypt is CPU-bound: one at a time, as upstream
                cached = self._verified.get(digest)
                if cached is None:
                    matched = await asyncio.to_thread(_checkpw, password.encode(),
                                                      hashed or _DECOY_HASH)
                    self.bcrypt_checks += 1
                    cached = matched and hashed is not None
                    self._remember(digest, cached)
        return cached

    def _digest(self, user: str, hashed: bytes, password: str) -> bytes:
        message = b"\0".join((user.encode(), hashed, password.encode()))
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _remember(self, digest: bytes, ok: bool) -> None:
        if len(self._verified) >= CACHE_SIZE:
            for old in random.sample(list(self._verified), max(1, CACHE_SIZE // 10)):
                del self._verified[old]
        self._verified[digest] = ok


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # here: a server without basic_auth_users never loads it

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # a hash bcrypt cannot read; load-time checks make this rare
        return False
