"""API keys: made once, shown once, stored only as a hash, looked up by their public id.

A key reads ``hgw_<id>_<secret>``: ``<id>`` is 12 hex characters, public, and what ``keys
list`` and the admin API show; ``<secret>`` is 32 random bytes, urlsafe base64.  The store
keeps ``sha256(key)``, never the key.  A plain SHA-256 is enough here, unlike for passwords:
the secret has 256 bits of entropy, so there is nothing to guess from the hash, and a slow
KDF (bcrypt, scrypt) would only cost CPU on every request.  A presented key is found by its
id and checked with ``hmac.compare_digest`` on the hashes (constant time), so response times
say nothing about how much of a guess was right.

The store is one SQLite file (WAL), shared by the gateway and the ``keys`` command: several
processes may open it at once.  ``PRAGMA data_version`` changes whenever another connection
commits, which is how a gateway notices a ``keys revoke`` run from the command line (see
``auth.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ApiKey", "KeyStore", "NewKey", "hash_key", "split_key"]

PREFIX = "hgw_"
_ID_CHARS = 12  # hex characters of the public id (48 bits: ids are unique, not secret)
_SECRET_BYTES = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    key_sha256 BLOB NOT NULL,
    tenant TEXT NOT NULL,
    app TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL,
    last_used_at REAL
);
"""
_FIELDS = "id, key_sha256, tenant, app, name, created_at, revoked_at, last_used_at"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One stored key: everything but the key itself."""

    id: str
    key_sha256: bytes
    tenant: str
    app: str
    name: str
    created_at: float
    revoked_at: float | None = None
    last_used_at: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def matches(self, key: str) -> bool:
        return hmac.compare_digest(self.key_sha256, hash_key(key))

    def public(self) -> dict[str, object]:
        """What listings show (no hash, no key)."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "app": self.app,
            "name": self.name,
            "created_at": self.created_at,
            "revoked": self.revoked,
            "revoked_at": self.revoked_at,
            "last_used_at": self.last_used_at,
        }


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: ``key`` is the only copy there will ever be."""

    key: str
    record: ApiKey


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def split_key(key: str) -> str | None:
    """The public id of a well-formed key, else None."""
    if len(key) <= len(PREFIX) + _ID_CHARS + 1 or not key.startswith(PREFIX):
        return None
    key_id = key[len(PREFIX) : len(PREFIX) + _ID_CHARS]
    if key[len(PREFIX) + _ID_CHARS] != "_" or not all(c in "0123456789abcdef" for c in key_id):
        return None
    return key_id


class KeyStore:
    """Hashed API keys in SQLite.  Every method is one short statement."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=2000")
        self._db.executescript(_SCHEMA)

    def create(self, tenant: str, app: str, name: str, now: float) -> NewKey:
        key_id = secrets.token_hex(_ID_CHARS // 2)
        key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"
        record = ApiKey(key_id, hash_key(key), tenant, app, name, now)
        self._db.execute(
            f"INSERT INTO api_keys ({_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)",
            (key_id, record.key_sha256, tenant, app, name, now),
        )
        return NewKey(key, record)

    def get(self, key_id: str) -> ApiKey | None:
        row = self._db.execute(f"SELECT {_FIELDS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
        return None if row is None else ApiKey(*row)

    def list(self) -> list[ApiKey]:
        rows = self._db.execute(f"SELECT {_FIELDS} FROM api_keys ORDER BY created_at, id")
        return [ApiKey(*row) for row in rows]

    def revoke(self, key_id: str, now: float) -> ApiKey | None:
        """Mark the key revoked (idempotent); None if there is no such key."""
        self._db.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id)
        )
        return self.get(key_id)

    def touch(self, last_used: Iterable[tuple[str, float]]) -> None:
        """Record last-use times, batched (the gateway writes them every few seconds)."""
        rows = [(at, key_id) for key_id, at in last_used]
        if not rows:
            return
        self._db.execute("BEGIN")
        self._db.executemany(
            "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?",
            rows,
        )
        self._db.execute("COMMIT")

    def data_version(self) -> int:
        """Changes whenever another connection (another process) has committed."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._db.close()
