"""`hybrid-gateway keys create | list | revoke` against a config's key store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hybrid_gateway.cli import main
from hybrid_gateway.tenancy.keys import KeyStore


@pytest.fixture
def config(tmp_path: Path) -> Path:
    data = {
        "channels": {"a": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}},
        "lanes": {"light": {"channel": "a"}, "heavy": {"channel": "a"}},
        "auth": {"enabled": True, "keys_path": "state/keys.sqlite3"},
        "tenants": {"acme": {"lanes": ["light"]}},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_create_list_revoke(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--config", str(config), "--tenant", "acme", "--app", "wiki",
                 "--name", "ops"]) == 0  # fmt: skip
    made = capsys.readouterr()
    key = made.out.strip()
    assert key.startswith("hgw_") and "\n" not in key  # stdout is the key and nothing else
    assert key not in made.err and "shown only now" in made.err
    store = KeyStore(config.parent / "state" / "keys.sqlite3")  # relative to the config
    (record,) = store.list()
    store.close()
    assert (record.tenant, record.app, record.name) == ("acme", "wiki", "ops")

    assert main(["keys", "list", "--config", str(config)]) == 0
    table = capsys.readouterr().out
    assert record.id in table and "wiki" in table and key not in table
    assert main(["keys", "revoke", "--config", str(config), record.id]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["keys", "list", "--config", str(config), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["revoked"] and listed["id"] == record.id
    assert main(["keys", "revoke", "--config", str(config), "ffffffffffff"]) == 1


def test_create_refuses_an_unknown_tenant(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--config", str(config), "--tenant", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "acme" in err and "default" in err
    assert main(["keys", "create", "--config", str(config), "--tenant", "default"]) == 0
