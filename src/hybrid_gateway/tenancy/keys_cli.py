"""`hybrid-gateway keys create | list | revoke`: manage API keys in the config's key store.

    keys create --config F --tenant T [--app A] [--name N]   prints the key, once
    keys list   --config F [--json]                          id, tenant, app, name, created, ...
    keys revoke --config F ID

The store is ``auth.keys_path`` of the config (relative to the config file).  A running gateway
sees a revoke at its next request (``tenancy/auth.py``).  The key is printed to stdout and
nowhere else; everything else goes to stderr, so ``KEY=$(hybrid-gateway keys create ...)``
captures exactly the key.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

from hybrid_gateway.config import load_config, resolve_path
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.tenancy.keys import ApiKey, KeyStore
from hybrid_gateway.tenancy.settings import DEFAULT_APP, tenant_names

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="make a key for a tenant (printed once)")
    create.add_argument("--config", required=True, help="the gateway's YAML config file")
    create.add_argument("--tenant", required=True, help="a tenant of the config (or 'default')")
    create.add_argument("--app", default=DEFAULT_APP, help="the business app it is for (default)")
    create.add_argument("--name", default="", help="a note: who holds it, what for")
    listing = sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--config", required=True, help="the gateway's YAML config file")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    revoke = sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("--config", required=True, help="the gateway's YAML config file")
    revoke.add_argument("id", help="the key id (from `keys list` or `keys create`)")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    store = KeyStore(resolve_path(args.config, config.auth.keys_path))
    try:
        if args.keys_command == "create":
            known = tenant_names(config.tenants)
            if args.tenant not in known:
                print(
                    f"keys create: unknown tenant {args.tenant!r} (one of: "
                    f"{', '.join(sorted(known))})",
                    file=sys.stderr,
                )
                return 2
            new = store.create(args.tenant, args.app, args.name, time.time())
            print(f"created key {new.record.id} for tenant {args.tenant}, app {args.app}; "
                  "it is shown only now:", file=sys.stderr)  # fmt: skip
            print(new.key)
            return 0
        if args.keys_command == "list":
            keys = store.list()
            if args.json:
                print(json.dumps([k.public() for k in keys], indent=2))
            else:
                print(render(keys))
            return 0
        record = store.revoke(args.id, time.time())
        if record is None:
            print(f"keys revoke: no key with id {args.id!r}", file=sys.stderr)
            return 1
        print(f"revoked key {record.id} (tenant {record.tenant}, app {record.app})")
        return 0
    finally:
        store.close()


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def render(keys: list[ApiKey]) -> str:
    header = ("id", "tenant", "app", "name", "created", "revoked", "last used")
    rows = [header] + [
        (k.id, k.tenant, k.app, k.name or "-", _when(k.created_at), _when(k.revoked_at),
         _when(k.last_used_at))
        for k in keys
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)  # fmt: skip
