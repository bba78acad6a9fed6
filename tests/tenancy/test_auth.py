"""API-key authentication and the admin-key guard."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_gateway.errors import AuthenticationFailed, PermissionDenied
from hybrid_gateway.tenancy.auth import TOUCH_INTERVAL_S, AdminGuard, Authenticator, bearer
from hybrid_gateway.tenancy.keys import KeyStore


class Wall:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[KeyStore]:
    keys = KeyStore(tmp_path / "keys.sqlite3")
    yield keys
    keys.close()


def test_a_valid_key_names_its_tenant_and_app(store: KeyStore) -> None:
    new = store.create("acme", "wiki", "", now=1.0)
    auth = Authenticator(store, {"acme", "default"}, Wall())
    identity = auth.authenticate(f"Bearer {new.key}")
    assert (identity.tenant, identity.app, identity.key_id) == ("acme", "wiki", new.record.id)
    assert auth.authenticate(f"bearer   {new.key}").tenant == "acme"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer sk-not-ours"])
def test_missing_or_foreign_keys_are_401(store: KeyStore, header: str | None) -> None:
    auth = Authenticator(store, {"default"}, Wall())
    with pytest.raises(AuthenticationFailed) as exc:
        auth.authenticate(header)
    assert exc.value.status == 401 and exc.value.code == "invalid_api_key"


def test_a_wrong_secret_for_a_real_id_is_refused_without_echoing_it(store: KeyStore) -> None:
    new = store.create("acme", "default", "", now=1.0)
    forged = new.key[:-4] + "AAAA"
    auth = Authenticator(store, {"acme"}, Wall())
    with pytest.raises(AuthenticationFailed) as exc:
        auth.authenticate(f"Bearer {forged}")
    assert forged not in exc.value.message and new.key not in exc.value.message
    assert forged[len("hgw_") + 13 :] not in exc.value.message


def test_revoke_from_another_process_is_seen_at_the_next_request(tmp_path: Path) -> None:
    gateway_side = KeyStore(tmp_path / "keys.sqlite3")
    cli_side = KeyStore(tmp_path / "keys.sqlite3")
    new = cli_side.create("acme", "default", "", now=1.0)
    auth = Authenticator(gateway_side, {"acme"}, Wall())
    assert auth.authenticate(f"Bearer {new.key}").tenant == "acme"  # now cached
    cli_side.revoke(new.record.id, now=2.0)
    with pytest.raises(AuthenticationFailed, match="revoked") as exc:
        auth.authenticate(f"Bearer {new.key}")
    assert new.key not in exc.value.message
    gateway_side.close()
    cli_side.close()


def test_revoke_through_this_process_invalidates_the_cache(store: KeyStore) -> None:
    new = store.create("acme", "default", "", now=1.0)
    auth = Authenticator(store, {"acme"}, Wall())
    auth.authenticate(f"Bearer {new.key}")
    store.revoke(new.record.id, now=2.0)  # our own connection: the data version stays
    auth.invalidate(new.record.id)
    with pytest.raises(AuthenticationFailed, match="revoked"):
        auth.authenticate(f"Bearer {new.key}")


def test_a_key_of_a_tenant_removed_from_the_config_is_refused(store: KeyStore) -> None:
    new = store.create("gone", "default", "", now=1.0)
    auth = Authenticator(store, {"acme", "default"}, Wall())
    with pytest.raises(AuthenticationFailed, match="no longer"):
        auth.authenticate(f"Bearer {new.key}")


def test_last_use_is_written_in_batches(store: KeyStore) -> None:
    new = store.create("acme", "default", "", now=1.0)
    wall = Wall(100.0)
    auth = Authenticator(store, {"acme"}, wall)
    auth.authenticate(f"Bearer {new.key}")
    record = store.get(new.record.id)
    assert record is not None and record.last_used_at is None
    wall.now += TOUCH_INTERVAL_S
    auth.authenticate(f"Bearer {new.key}")
    record = store.get(new.record.id)
    assert record is not None and record.last_used_at == wall.now


def test_bearer() -> None:
    assert bearer("Bearer abc") == "abc"
    assert bearer("BEARER  abc ") == "abc"
    assert bearer("Token abc") is None
    assert bearer(None) is None


def test_admin_guard() -> None:
    off = AdminGuard(None, "HGW_ADMIN")
    with pytest.raises(PermissionDenied, match="HGW_ADMIN") as disabled:
        off.check("Bearer anything")
    assert disabled.value.status == 403 and disabled.value.code == "admin_api_disabled"
    guard = AdminGuard("s3cret-admin", "HGW_ADMIN")
    guard.check("Bearer s3cret-admin")
    for header in [None, "Bearer", "Bearer s3cret", "Bearer s3cret-admin-", "Basic s3cret-admin"]:
        with pytest.raises(AuthenticationFailed) as wrong:
            guard.check(header)
        assert wrong.value.status == 401 and "s3cret" not in wrong.value.message
