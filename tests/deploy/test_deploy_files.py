"""The deployment files deploy: schemas, and every path, port, route and env var they name.

No Docker engine or cluster is needed: the compose file is checked against the Compose
Specification's JSON schema and the Kubernetes manifests against the API's strict schemas
(both vendored under ``schemas/``, see its README); the Dockerfile is linted by hadolint in
``make lint``.  What the files name is then checked against the project itself.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from aiohttp import web

from hybrid_gateway.api.app import create_app
from hybrid_gateway.cli import command_parser
from hybrid_gateway.config import GatewayConfig, ServerConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).parent / "schemas"
K8S_FILES = sorted((DEPLOY / "k8s").glob("*.yaml"))
CONFIG_DIR = "/etc/hybrid-gateway"
VAR_DIR = "/var/lib/hybrid-gateway"
# Environment variables Python, pip, numpy's BLAS or the OS read (ENV lines of the Dockerfile).
PLATFORM_ENV = frozenset({"PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
                          "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_CACHE_DIR",
                          "OPENBLAS_NUM_THREADS"})  # fmt: skip


# -- reading the files ------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def instructions(name: str, stage: int | None = None) -> list[str]:
    """The arguments of every ``name`` instruction (of the last stage when ``stage=-1``)."""
    stages: list[list[tuple[str, str]]] = []
    for kind, args in dockerfile():
        if kind == "FROM":
            stages.append([])
        stages[-1].append((kind, args))
    chosen = stages if stage is None else [stages[stage]]
    return [args for part in chosen for kind, args in part if kind == name]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def k8s_documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in K8S_FILES:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield path, document


def gateway_container() -> dict[str, Any]:
    for _, document in k8s_documents():
        if document["kind"] == "Deployment" and document["metadata"]["name"] == "hybrid-gateway":
            return document["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]
    raise AssertionError("no hybrid-gateway Deployment in deploy/k8s")


def deploy_config() -> GatewayConfig:
    return load_config(DEPLOY / "gateway.yaml")


@cache
def schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text())  # type: ignore[no-any-return]


def schema_errors(document: Any, schema_doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.validators.validator_for(schema_doc)(schema_doc)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in
            validator.iter_errors(document)]  # fmt: skip


def k8s_errors(document: dict[str, Any]) -> list[str]:
    bundle = schema("kubernetes-v1.37-strict.json")
    kind = document.get("kind")
    if f"kind.{kind}" not in bundle["$defs"]:
        return [f"no vendored schema for kind {kind!r}"]
    return schema_errors(document, {"$defs": bundle["$defs"], "$ref": f"#/$defs/kind.{kind}"})


# -- schemas ----------------------------------------------------------------------------------


def test_compose_file_matches_the_compose_specification() -> None:
    assert schema_errors(compose(), schema("compose-spec.json")) == []


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_kubernetes_manifests_match_the_api_schemas(path: Path) -> None:
    documents = [d for p, d in k8s_documents() if p == path]
    assert documents
    assert [error for d in documents for error in k8s_errors(d)] == []


def test_the_schema_checks_catch_mistakes() -> None:
    broken = compose()
    broken["services"]["gateway"]["stop_grace"] = "30s"  # a misspelled key
    assert schema_errors(broken, schema("compose-spec.json"))
    container = gateway_container()
    container["readinessProbe"]["httpGet"]["port"] = {"name": "http"}  # wrong type
    deployment = next(d for _, d in k8s_documents() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"] = [{**container, "containerPort": 1}]
    errors = k8s_errors(deployment)
    assert any("containerPort" in e for e in errors) and any("port" in e for e in errors)


# -- what the files name exists ---------------------------------------------------------------


def test_dockerfile_copies_paths_that_exist_and_the_build_context_lets_through() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copies = [c for c in instructions("COPY") if not c.startswith("--from")]
    assert copies
    for copy in copies:
        *sources, _target = copy.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path"
            assert source.rstrip("/") in allowed, f"COPY {source}: excluded by .dockerignore"
    assert compose()["services"]["gateway"]["build"] == ".."  # the folder of the Dockerfile
    assert (DEPLOY / ".." / "Dockerfile").is_file()


def test_every_port_is_the_gateways_port() -> None:
    port = deploy_config().server.port
    assert port == ServerConfig().port == 8080  # the config's default
    assert instructions("EXPOSE", stage=-1) == [str(port)]
    (healthcheck,) = instructions("HEALTHCHECK", stage=-1)
    assert f"http://127.0.0.1:{port}/readyz" in healthcheck
    assert serve_args(exec_form(instructions("CMD", stage=-1)[0])).port == port
    assert serve_args(compose()["services"]["gateway"]["command"]).port == port
    container = gateway_container()
    assert serve_args(container["args"]).port == port
    assert container["ports"] == [{"containerPort": port, "name": "http"}]
    service = next(d for _, d in k8s_documents() if d["kind"] == "Service"
                   and d["metadata"]["name"] == "hybrid-gateway")  # fmt: skip
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    nginx = (DEPLOY / "nginx.conf").read_text()
    assert f"server gateway:{port};" in nginx


def serve_args(argv: list[str]) -> Any:
    """Parse a container's command with the real CLI: unknown flags fail here."""
    assert argv[:2] == ["hybrid-gateway", "serve"], argv
    parser, _ = command_parser("serve")
    return parser.parse_args(argv[2:])


def test_commands_name_the_mounted_config() -> None:
    config = f"{CONFIG_DIR}/gateway.yaml"
    commands = [
        exec_form(instructions("CMD", stage=-1)[0]),
        compose()["services"]["gateway"]["command"],
        gateway_container()["args"],
    ]
    for argv in commands:
        args = serve_args(argv)
        assert args.config == config
        assert args.grace_s < 30  # inside compose's stop_grace_period / k8s' termination grace
    volumes = compose()["services"]["gateway"]["volumes"]
    assert f"./gateway.yaml:{config}:ro" in volumes
    assert (DEPLOY / "gateway.yaml").is_file() and (DEPLOY / "nginx.conf").is_file()
    mounts = {m["name"]: m["mountPath"] for m in gateway_container()["volumeMounts"]}
    assert mounts["config"] == CONFIG_DIR


def test_the_var_volume_holds_the_request_log() -> None:
    assert instructions("VOLUME", stage=-1) == [f'["{VAR_DIR}"]']
    assert any(v.startswith(f"gateway-var:{VAR_DIR}") for v in compose()["services"]["gateway"]
               ["volumes"])  # fmt: skip
    mounts = {m["name"]: m["mountPath"] for m in gateway_container()["volumeMounts"]}
    assert mounts["var"] == VAR_DIR
    log_path = PurePosixPath(deploy_config().server.request_log.path)
    assert log_path.parent == PurePosixPath(VAR_DIR)


def test_probe_and_healthcheck_paths_are_gateway_routes() -> None:
    app = create_app(deploy_config())
    routes = {
        resource.canonical
        for resource in app.router.resources()
        if any(route.method == "GET" for route in resource)
    }
    container = gateway_container()
    probes = [container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")]
    healthcheck = instructions("HEALTHCHECK", stage=-1)[0]
    (path,) = re.findall(r"http://127\.0\.0\.1:\d+(/\w+)", healthcheck)
    assert path == "/readyz" and probes == ["/readyz", "/healthz"]
    assert {path, *probes} <= routes
    assert isinstance(app, web.Application)


def test_environment_variables_are_ones_the_code_reads() -> None:
    read = set(config_env_names(deploy_config().model_dump()))  # defaults included
    named = {line.split("=", 1)[0] for env in instructions("ENV") for line in shlex.split(env)}
    gateway_env = compose()["services"]["gateway"].get("environment") or {}
    named |= set(gateway_env)
    named |= {e["name"] for e in gateway_container().get("env", [])}
    assert named - PLATFORM_ENV <= read, named - PLATFORM_ENV - read
    assert "HYBRID_GATEWAY_ADMIN_KEY" in read  # what an operator may set: auth.admin_key_env


def config_env_names(value: Any) -> Iterator[str]:
    """Every environment variable the config names (fields ending in ``_env``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_env") and isinstance(item, str):
                yield item
            else:
                yield from config_env_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from config_env_names(item)
