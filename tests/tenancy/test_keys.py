"""The key store: keys made once, kept only as hashes, found by their public id."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.tenancy.keys import PREFIX, KeyStore, hash_key, split_key


def test_a_new_key_is_stored_only_as_its_hash(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite3")
    new = store.create("acme", "wiki", "ops laptop", now=100.0)
    store.close()
    assert new.key.startswith(PREFIX + new.record.id + "_")
    assert len(new.key) > 40
    assert split_key(new.key) == new.record.id
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    secret = new.key.removeprefix(PREFIX + new.record.id + "_")
    assert new.key.encode() not in on_disk
    assert secret.encode() not in on_disk
    assert hash_key(new.key) == new.record.key_sha256


def test_get_list_revoke_and_last_use(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite3")
    first = store.create("acme", "wiki", "", now=1.0).record
    second = store.create("beta", "default", "ci", now=2.0).record
    assert [k.id for k in store.list()] == [first.id, second.id]
    got = store.get(first.id)
    assert got is not None and got.tenant == "acme" and got.app == "wiki" and not got.revoked
    revoked = store.revoke(first.id, now=5.0)
    assert revoked is not None and revoked.revoked and revoked.revoked_at == 5.0
    again = store.revoke(first.id, now=9.0)  # idempotent: the first revocation time stays
    assert again is not None and again.revoked_at == 5.0
    assert store.revoke("000000000000", now=5.0) is None
    store.touch([(second.id, 7.0)])
    store.touch([(second.id, 6.0)])  # never goes back in time
    touched = store.get(second.id)
    assert touched is not None and touched.last_used_at == 7.0
    public = touched.public()
    assert "key_sha256" not in public and public["id"] == second.id


def test_matching_is_by_the_whole_key(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys.sqlite3")
    new = store.create("acme", "default", "", now=1.0)
    assert new.record.matches(new.key)
    assert not new.record.matches(new.key[:-1] + ("A" if new.key[-1] != "A" else "B"))


def test_malformed_keys_have_no_id() -> None:
    for key in ["", "sk-abc", "hgw_", "hgw_xyz", "hgw_0123456789ab", "hgw_0123456789abX",
                "hgw_0123456789AB_secret", "hgw_0123456789a_secret"]:  # fmt: skip
        assert split_key(key) is None, key
    assert split_key("hgw_0123456789ab_s") == "0123456789ab"


def test_another_connections_commit_changes_the_data_version(tmp_path: Path) -> None:
    gateway = KeyStore(tmp_path / "keys.sqlite3")
    cli = KeyStore(tmp_path / "keys.sqlite3")
    before = gateway.data_version()
    gateway.touch([])  # nothing written
    assert gateway.data_version() == before
    cli.create("acme", "default", "", now=1.0)
    assert gateway.data_version() != before
