"""Who is calling: ``Authorization: Bearer <key>`` -> tenant and app, or a 401.

Looked-up keys are cached in the process, so a request costs a dict lookup, a SHA-256 and one
``PRAGMA data_version`` (a few microseconds), not a query.  The cache stays coherent without a
TTL: the data version changes whenever another connection commits to the key store, e.g. a
``hybrid-gateway keys revoke`` in another process, and a changed version drops the whole cache
before the key is checked.  A revoke through this gateway's admin API also drops the entry
directly.  Either way a revoked key is refused from the next request on.

Messages never contain the presented key, nor any part of it: error bodies and log lines are
copied into tickets and chat rooms.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass

from hybrid_gateway.errors import AuthenticationFailed, PermissionDenied
from hybrid_gateway.tenancy.keys import ApiKey, KeyStore, split_key
from hybrid_gateway.tenancy.settings import DEFAULT_APP, DEFAULT_TENANT, AuthConfig

__all__ = ["ANONYMOUS", "AdminGuard", "Authenticator", "Identity", "bearer", "read_admin_key"]

# How often the last-use times collected in memory are written to the key store.
TOUCH_INTERVAL_S = 30.0


@dataclass(frozen=True, slots=True)
class Identity:
    tenant: str
    app: str
    key_id: str | None = None


ANONYMOUS = Identity(DEFAULT_TENANT, DEFAULT_APP)


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Authenticator:
    """Checks API keys against a ``KeyStore``; ``wall`` gives epoch seconds for last-use times."""

    def __init__(
        self, store: KeyStore, tenants: Collection[str], wall: Callable[[], float]
    ) -> None:
        self._store = store
        self._tenants = frozenset(tenants)
        self._wall = wall
        self._cache: dict[str, ApiKey] = {}
        self._version = store.data_version()
        self._last_used: dict[str, float] = {}
        self._touched_at = wall()

    def authenticate(self, authorization: str | None) -> Identity:
        key = bearer(authorization)
        if key is None:
            raise AuthenticationFailed(
                "No API key: send 'Authorization: Bearer <key>' with a key from "
                "`hybrid-gateway keys create`."
            )
        key_id = split_key(key)
        record = None if key_id is None else self._lookup(key_id)
        if record is None or not record.matches(key):
            raise AuthenticationFailed("Incorrect API key provided.")
        if record.revoked:
            raise AuthenticationFailed(f"The API key {record.id} has been revoked.")
        if record.tenant not in self._tenants:
            raise AuthenticationFailed(
                f"The API key {record.id} belongs to tenant '{record.tenant}', which is no "
                f"longer in the gateway's config."
            )
        self._note_use(record.id)
        return Identity(record.tenant, record.app, record.id)

    def replace_tenants(self, tenants: Collection[str]) -> None:
        """Hot reload: keys of a tenant no longer configured are refused from the next request
        (401, the key stays in the store and works again if the tenant comes back)."""
        self._tenants = frozenset(tenants)

    def invalidate(self, key_id: str) -> None:
        """Forget a cached key (after a revoke through this process)."""
        self._cache.pop(key_id, None)

    def flush(self) -> None:
        """Write the collected last-use times to the store."""
        used, self._last_used = self._last_used, {}
        self._store.touch(used.items())
        self._touched_at = self._wall()
        # Our own commit does not change the version our connection sees; nothing to drop.

    def _lookup(self, key_id: str) -> ApiKey | None:
        version = self._store.data_version()
        if version != self._version:
            self._version = version
            self._cache.clear()
        record = self._cache.get(key_id)
        if record is None:
            record = self._store.get(key_id)
            if record is not None:
                self._cache[key_id] = record
        return record

    def _note_use(self, key_id: str) -> None:
        now = self._wall()
        self._last_used[key_id] = now
        if now - self._touched_at >= TOUCH_INTERVAL_S:
            self.flush()


def read_admin_key(auth: AuthConfig) -> str | None:
    """The admin key from the environment variable the config names; None when unset."""
    if auth.admin_key_env is None:
        return None
    return os.environ.get(auth.admin_key_env) or None


class AdminGuard:
    """The admin-key check every admin handler runs first.

    No admin key configured: 403 (the admin API is off).  Missing or wrong key: 401.  Keys are
    compared as SHA-256 digests with ``hmac.compare_digest``, so neither the time taken nor an
    early exit on length tells a caller how close a guess was.
    """

    def __init__(self, admin_key: str | None, env_name: str | None) -> None:
        self._digest = None if admin_key is None else hashlib.sha256(admin_key.encode()).digest()
        self._env_name = env_name

    @property
    def enabled(self) -> bool:
        return self._digest is not None

    def check(self, authorization: str | None) -> None:
        if self._digest is None:
            where = f"set {self._env_name}" if self._env_name else "set auth.admin_key_env"
            raise PermissionDenied(
                f"The admin API is disabled on this gateway; {where} to enable it.",
                code="admin_api_disabled",
            )
        token = bearer(authorization)
        presented = hashlib.sha256((token or "").encode()).digest()
        if token is None or not hmac.compare_digest(presented, self._digest):
            raise AuthenticationFailed(
                "The admin API needs 'Authorization: Bearer <admin key>'.", code="invalid_admin_key"
            )
