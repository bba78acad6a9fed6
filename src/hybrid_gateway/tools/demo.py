"""`hybrid-gateway demo`: the request path, then the strategy comparison, in about 3 minutes.

Part 1 (about ten seconds): starts two emulators (light and heavy, with the example config's
model names) and the gateway with the example config (channel URLs pointed at the emulators,
free ports, the request log in a temporary folder), sends a short mix of simple and complex
questions through the official OpenAI SDK, prints what answered each one and why, and stops.

Part 2: `hybrid-gateway bench run` on a short workload built from the real data in
``../shared/data``: heavy-only vs hybrid vs hybrid + cache vs the whole article (``full``,
examples/gateway-full.yaml), scored for latency, quality and cost, ending with the table (the
``full`` row last) and the paths of the plots.  Without the data folder it says so and stops
after part 1.
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import tempfile
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.config import GatewayConfig, load_config
from hybrid_gateway.errors import ConfigError
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    python_module_argv,
    start_process,
    stop_process,
)

# (question, stream): simple look-ups, complex reasoning, Chinese and English, some asked twice.
QUESTIONS: Sequence[tuple[str, bool]] = (
    ("这个接口怎么调用?", False),
    (
        "这个接口的鉴权原理是什么?请结合令牌签发、过期刷新和服务端校验的完整流程详细说明,"
        "并比较它与双向TLS的优缺点。",
        False,
    ),
    ("How do I install the SDK on Ubuntu?", False),
    ("What is the default timeout?", True),
    ("Compare optimistic and pessimistic locking for a bank ledger that must never double-spend; "
     "walk through a race between two transfers step by step.", True),
    ("这个接口怎么调用?", False),  # asked again: exact cache
    ("在哪里设置日志级别?", False),
    ("```python\ndef f(xs): return sorted(xs)[len(xs)//2]\n```\nWhy is this median wrong?", False),
    ("How do I install the SDK on Ubuntu?", True),  # asked again, streamed: cache replays it
    ("What is a vector database?", False),
)  # fmt: skip


@dataclass(frozen=True)
class Answer:
    question: str
    stream: bool
    route: str
    cache: str
    cost: str
    latency_ms: float
    text: str


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="examples/gateway.yaml", help="gateway config to demo")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (logs, db)")
    parser.add_argument(
        "--no-bench", action="store_true", help="skip part 2, the strategy comparison"
    )
    parser.add_argument("--out", default="out/demo", help="where part 2 writes its report")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"config error: {exc}")
        return 2
    folder = Path(tempfile.mkdtemp(prefix="hybrid-gateway-demo-"))
    processes: list[ManagedProcess] = []
    try:
        for lane in ("light", "heavy"):
            channel = config.channels[config.lanes[lane].channel]
            argv = python_module_argv("hybrid_gateway.cli", "emulate", "--profile", lane,
                                      "--model", channel.model, "--port", "0")  # fmt: skip
            processes.append(start_process(f"{lane}-emulator", argv, folder, timeout_s=30))
            print(f"{lane} emulator ({channel.model}) at {processes[-1].url}")
        config_path = _demo_config(args.config, config, [p.url for p in processes], folder)
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config", str(config_path))
        gateway = start_process("gateway", argv, folder, timeout_s=30)
        processes.append(gateway)
        print(f"gateway at {gateway.url} (config: {args.config})\n")
        answers = [_ask(gateway.url + "/v1", q, stream) for q, stream in QUESTIONS]
        _print_table(answers)
    finally:
        for process in reversed(processes):
            stop_process(process)
    _print_summary(folder / "requests.sqlite3", config)
    if args.keep:
        print(f"\nkept: {folder}")
    return 0 if args.no_bench else _compare_strategies(args.config, args.out)


# Part 2's size: four strategies x two 5 s stages, no warm-up.  Each stage also drains the
# requests in flight at its end (heavy answers take seconds), and `full` loads the embedding
# model first: about 2.5 minutes on 2 cores.
_BENCH_ARGS = (
    "--size", "1500", "--concurrency", "20,50", "--duration", "5", "--warmup", "0",
    "--strategies", "heavy-only,hybrid,hybrid-cache,full",
)  # fmt: skip


def _compare_strategies(config: str, out: str) -> int:
    from hybrid_gateway.tools.workload.cli import resolve_data
    from hybrid_gateway.tools.workload.sources import DataMissingError

    try:
        data = resolve_data(None)
    except DataMissingError as exc:
        print(f"\nstrategy comparison skipped: {exc}")
        return 0
    print(f"\n== strategy comparison on a workload built from {data} ==", flush=True)
    argv = python_module_argv(
        "hybrid_gateway.cli", "bench", "run", "--base-config", config, "--out", out, *_BENCH_ARGS
    )
    return subprocess.run(argv, check=False).returncode


def _demo_config(path: str, config: GatewayConfig, urls: list[str], folder: Path) -> Path:
    """The example config as written, with channel URLs, port and log path made local."""
    data: dict[str, Any] = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for lane, url in zip(("light", "heavy"), urls, strict=True):
        data["channels"][config.lanes[lane].channel]["base_url"] = url + "/v1"
    server = data.setdefault("server", {})
    server["port"] = 0
    server.setdefault("request_log", {})["path"] = str(folder / "requests.sqlite3")
    out = folder / "gateway.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


def _ask(base_url: str, question: str, stream: bool) -> Answer:
    import openai  # the demo's client is the official SDK, as a user's would be

    sdk = openai.OpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=60)
    messages: Any = [{"role": "user", "content": question}]
    started = time.perf_counter()
    if stream:
        with sdk.chat.completions.with_streaming_response.create(
            model="auto", messages=messages, max_tokens=48, stream=True
        ) as response:
            text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
            headers = response.headers
    else:
        raw = sdk.chat.completions.with_raw_response.create(
            model="auto", messages=messages, max_tokens=48
        )
        text = raw.parse().choices[0].message.content or ""
        headers = raw.headers
    return Answer(
        question=question, stream=stream, route=headers["x-gateway-route"],
        cache=headers["x-gateway-cache"], cost=headers["x-gateway-cost-usd"],
        latency_ms=(time.perf_counter() - started) * 1000, text=text,
    )  # fmt: skip


def _print_table(answers: Sequence[Answer]) -> None:
    print(f"{'#':>2}  {'question':<34} {'mode':<6} {'lane':<6} {'rule':<18} {'cache':<6} "
          f"{'ms':>7}  answer")  # fmt: skip
    for i, a in enumerate(answers, 1):
        parts = dict(p.split("=", 1) for p in a.route.split("; "))
        question = _fit(a.question.replace("\n", " "), 34)
        mode = "stream" if a.stream else "json"
        print(f"{i:>2}  {question} {mode:<6} {parts['lane']:<6} {parts['rule']:<18} "
              f"{a.cache:<6} {a.latency_ms:>7.0f}  {_fit(a.text, 40).rstrip()}")  # fmt: skip


def _print_summary(log_path: Path, config: GatewayConfig) -> None:
    with sqlite3.connect(log_path) as db:
        rows = db.execute(
            "SELECT lane, cache, prompt_tokens, completion_tokens, cost_usd FROM requests"
        ).fetchall()
    heavy = config.channels[config.lanes["heavy"].channel]
    total = sum(r[4] or 0 for r in rows)
    heavy_only = sum(
        ((r[2] or 0) * heavy.price_per_1m_input + (r[3] or 0) * heavy.price_per_1m_output) / 1e6
        for r in rows
    )
    hits = sum(1 for r in rows if r[1] == "exact")
    light = sum(1 for r in rows if r[0] == "light" and r[1] != "exact")
    print(f"\nrequest log: {len(rows)} rows | light lane {light}, heavy lane "
          f"{len(rows) - light - hits}, exact-cache hits {hits}")  # fmt: skip
    if heavy_only > 0:
        print(f"cost: ${total:.6f} vs ${heavy_only:.6f} if every request had gone to the heavy "
              f"model ({total / heavy_only:.0%})")  # fmt: skip


def _fit(text: str, columns: int) -> str:
    """Clip and pad ``text`` to ``columns`` terminal columns (CJK characters take two)."""
    out: list[str] = []
    used = 0
    for char in text:
        width = 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        if used + width > columns - 1 and len(text) > len(out) + 1:
            out.append("…")
            used += 1
            break
        out.append(char)
        used += width
    return "".join(out) + " " * max(0, columns - used)
