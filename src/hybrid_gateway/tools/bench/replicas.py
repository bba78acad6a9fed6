"""``hybrid-gateway bench replicas``: one lane served by N emulator replicas, per policy.

For each policy: N emulator processes (automatic prefix caching on), a gateway whose one
channel has them as ``endpoints`` with that ``balancing.policy``, and the same multi-turn
workload (``tools/workload/conversations.py``, the same seed: equal offered load).  Reported:
TTFT and end-to-end p50/p95, throughput, the emulators' prefix-cache hit rate, in-flight
imbalance (max/mean over time), requests per endpoint.  Then, with ``--kill-policy``, the same
run again with one replica SIGKILLed a third of the way in and started again on its port
``--restart-after-s`` later: failed requests, time to eject, time to take it back.  And the cost
of one decision at 64 endpoints, in process.  JSON, Markdown and PNG under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import socket
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml

from hybrid_gateway.tools.bench.replicas_decision import decision_costs
from hybrid_gateway.tools.bench.replicas_load import Sampler, run_conversations
from hybrid_gateway.tools.bench.replicas_report import (
    KillFigures,
    as_dict,
    goals,
    policy_figures,
    write_report,
)
from hybrid_gateway.tools.processes import (
    ManagedProcess,
    ProcessStartError,
    python_module_argv,
    start_process,
    stop_process,
)
from hybrid_gateway.tools.workload.conversations import (
    Conversation,
    ConversationPlan,
    build_conversations,
    load_texts,
    mooncake_prompts,
)
from hybrid_gateway.tools.workload.sources import DataMissingError
from hybrid_gateway.upstreams.pool.settings import BalancingConfig

POLICIES = ("round_robin", "least_outstanding", "prefix_affinity", "session")
PROBE_INTERVAL_S = 0.5  # the bench pool's active check interval


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--endpoints", type=int, default=4, help="emulator replicas behind the channel")
    add("--policies", default="round_robin,least_outstanding,prefix_affinity",
        help=f"comma-separated, of: {', '.join(POLICIES)}")  # fmt: skip
    add("--kill-policy", default="prefix_affinity",
        help="the policy of the kill-and-restart run ('none': no such run)")  # fmt: skip
    add("--restart-after-s", type=float, default=5.0)
    add(
        "--workload",
        choices=["conversations", "mooncake"],
        default="conversations",
        help="multi-turn conversations, or the Mooncake trace's requests and shared prefixes",
    )
    add("--trace-requests", type=int, default=400, help="mooncake: the trace's first N")
    add("--trace-speedup", type=float, default=4.0, help="mooncake: arrivals N times faster")
    add(
        "--trace-block-tokens",
        type=int,
        default=64,
        help="mooncake: tokens of text per 512-token block of the trace (scaled down)",
    )
    add("--conversations", type=int, default=48)
    add("--turns", type=int, default=6)
    add("--rate", type=float, default=4.0, help="conversation starts per second")
    add("--system-prompts", type=int, default=4)
    add("--system-tokens", type=int, default=1024)
    add("--context-tokens", type=int, default=1024)
    add("--max-tokens", type=int, default=48)
    guard = BalancingConfig()
    add("--balance-abs", type=float, default=guard.balance_abs,
        help="prefix_affinity's load guard, absolute")  # fmt: skip
    add("--balance-rel", type=float, default=guard.balance_rel,
        help="prefix_affinity's load guard, relative")  # fmt: skip
    add("--match-slack", type=float, default=guard.match_slack,
        help="prefix_affinity: matches this much shorter count as the longest")  # fmt: skip
    add("--emulator-profile", default="light")
    add("--prefix-cache-tokens", type=int, default=65536, help="each emulator's prefix cache")
    add("--data-dir", type=Path, default=Path("../shared/data"))
    add("--seed", type=int, default=0)
    add("--out", type=Path, default=Path("out/bench/replicas"))
    add("--decision-only", action="store_true",
        help="only the in-process cost of one decision at 64 endpoints (no processes)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in [*policies, args.kill_policy] if p not in (*POLICIES, "none")]
    if unknown or not policies or args.endpoints < 2:
        print(f"bench replicas: --policies of {', '.join(POLICIES)} and --endpoints >= 2 "
              f"expected, got {args.policies!r} / {args.endpoints}", file=sys.stderr)  # fmt: skip
        return 2
    try:
        texts = load_texts(args.data_dir)
    except DataMissingError as exc:
        print(f"bench replicas: {exc}", file=sys.stderr)
        return 2
    plan = ConversationPlan(
        conversations=args.conversations, turns=args.turns, system_prompts=args.system_prompts,
        system_tokens=args.system_tokens, context_tokens=args.context_tokens, rate=args.rate,
        max_tokens=args.max_tokens, seed=args.seed,
    )  # fmt: skip
    conversations = build_conversations(texts, plan)
    if args.workload == "mooncake":
        trace = args.data_dir / "traces" / "mooncake_conversation.jsonl"
        if not trace.is_file():
            print(f"bench replicas: {trace} not found", file=sys.stderr)
            return 2
        prompts = mooncake_prompts(
            trace, texts, block_tokens=args.trace_block_tokens, limit=args.trace_requests,
            max_tokens=args.max_tokens, speedup=args.trace_speedup,
        )  # fmt: skip
        conversations = [prompt.as_conversation(i) for i, prompt in enumerate(prompts)]
    report: dict[str, Any] = {"command": _command(), "settings": _settings(args, plan)}
    figures, kill, timeline = [], None, None
    try:
        if not args.decision_only:
            figures = [_policy_run(args, policy, conversations) for policy in policies]
        if args.kill_policy != "none" and not args.decision_only:
            kill, timeline = _kill_run(args, args.kill_policy, conversations)
    except ProcessStartError as exc:
        print(f"bench replicas: a process did not start: {exc}", file=sys.stderr)
        return 1
    # the decision's own sample: 500 conversations of the same shape, 3,000 decisions
    sample = build_conversations(texts, replace(plan, conversations=500))
    costs = decision_costs(sample, list(POLICIES))
    report |= {"policies": [as_dict(f) for f in figures], "kill": as_dict(kill),
               "kill_timeline": timeline, "decision": [as_dict(c) for c in costs],
               "goals": goals(figures, kill, costs)}  # fmt: skip
    for path in write_report(args.out, report):
        print(f"wrote {path}")
    return 0


def _command() -> str:
    return "hybrid-gateway bench replicas " + " ".join(shlex.quote(a) for a in sys.argv[3:])


def _settings(args: argparse.Namespace, plan: ConversationPlan) -> dict[str, Any]:
    workload: dict[str, Any] = asdict(plan)
    if args.workload == "mooncake":
        workload = {"trace": "mooncake_conversation.jsonl", "requests": args.trace_requests,
                    "speedup": args.trace_speedup, "block_tokens": args.trace_block_tokens,
                    "max_tokens": args.max_tokens}  # fmt: skip
    return {"endpoints": args.endpoints, "emulator_profile": args.emulator_profile,
            "balance_abs": args.balance_abs, "balance_rel": args.balance_rel,
            "match_slack": args.match_slack, "prefix_cache_tokens": args.prefix_cache_tokens,
            "workload": workload,
            "probe_interval_s": PROBE_INTERVAL_S}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _emulator(args: argparse.Namespace, port: int, logs: Path, tag: str) -> ManagedProcess:
    argv = python_module_argv(
        "hybrid_gateway.cli", "emulate", "--host", "127.0.0.1", "--port", str(port),
        "--profile", args.emulator_profile, "--model", "light-model",
        "--prefix-cache-tokens", str(args.prefix_cache_tokens),
    )  # fmt: skip
    return start_process(f"emulator-{port}-{tag}", argv, logs, timeout_s=30)


def _gateway_config(args: argparse.Namespace, ports: list[int], policy: str, work: Path) -> Path:
    config = {
        "server": {"host": "127.0.0.1", "port": 0, "request_log": {"enabled": False},
                   "log": {"level": "WARNING"}},
        "channels": {"pool": {
            "model": "light-model", "timeout_s": 30, "connect_timeout_s": 1,
            # the emulator answers a prompt the same way on every replica (as greedy decoding)
            "resume_streams": "always",
            "endpoints": [{"url": f"http://127.0.0.1:{p}/v1", "name": f"r{i}"}
                          for i, p in enumerate(ports)],
            "balancing": {"policy": policy, "balance_abs": args.balance_abs,
                          "balance_rel": args.balance_rel, "match_slack": args.match_slack},
            "health": {"consecutive_failures": 2, "base_ejection_s": 1, "max_ejection_s": 2,
                       "active": {"path": "/healthz", "interval_s": PROBE_INTERVAL_S,
                                  "timeout_s": 0.5}},
        }},
        "lanes": {"light": {"channel": "pool"}},
        "models": [{"id": "light", "lane": "light"}],
        "routing": {"default_lane": "light"},
        "cache": {"exact": {"enabled": False}},
    }  # fmt: skip
    path = work / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


class _Stack:
    """The emulators and the gateway of one run; an emulator can be killed and started again."""

    def __init__(self, args: argparse.Namespace, policy: str, work: Path, stack: ExitStack):
        work.mkdir(parents=True, exist_ok=True)
        self.args, self.logs = args, work / "logs"
        self.ports = [_free_port() for _ in range(args.endpoints)]
        self.emulators: dict[int, ManagedProcess] = {}
        stack.callback(self._stop)
        for port in self.ports:
            self.emulators[port] = _emulator(args, port, self.logs, "a")
        argv = python_module_argv("hybrid_gateway.cli", "serve", "--config",
                                  str(_gateway_config(args, self.ports, policy, work)))  # fmt: skip
        self.gateway = start_process("gateway", argv, self.logs, timeout_s=60)
        stack.callback(stop_process, self.gateway)

    def urls(self) -> dict[str, str]:
        return {f"r{i}": f"http://127.0.0.1:{p}" for i, p in enumerate(self.ports)}

    def kill(self, index: int) -> None:
        process = self.emulators[self.ports[index]]
        process.popen.kill()
        process.popen.wait(10)

    def restart(self, index: int) -> None:
        port = self.ports[index]
        self.emulators[port] = _emulator(self.args, port, self.logs, "b")

    def _stop(self) -> None:
        for process in self.emulators.values():
            stop_process(process)


def _policy_run(args: argparse.Namespace, policy: str, conversations: list[Conversation]) -> Any:
    print(f"bench replicas: {policy} ...", file=sys.stderr)
    with ExitStack() as stack:
        running = _Stack(args, policy, args.out / "runs" / policy, stack)
        results, sampler = asyncio.run(_drive(running, conversations))
    return policy_figures(policy, results, sampler.samples, sampler.stats)


async def _drive(running: _Stack, conversations: list[Conversation]) -> tuple[Any, Sampler]:
    t0 = time.perf_counter()
    sampler = Sampler(running.urls, running.gateway.url, t0)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    results = await run_conversations(running.gateway.url, conversations, t0)
    stop.set()
    await sampling
    return results, sampler


def _kill_run(
    args: argparse.Namespace, policy: str, conversations: list[Conversation]
) -> tuple[KillFigures, dict[str, Any]]:
    print(f"bench replicas: kill and restart ({policy}) ...", file=sys.stderr)
    span = conversations[-1].start_s
    with ExitStack() as stack:
        running = _Stack(args, policy, args.out / "runs" / f"kill-{policy}", stack)
        results, sampler, marks = asyncio.run(_drive_kill(running, conversations, span / 3))
    victim = "r1"
    failed = sum(1 for r in results if not r.ok)
    killed_at, listening_at = marks
    after_kill = [s for s in sampler.samples if s.t_s >= killed_at]
    after_restart = [s for s in sampler.samples if s.t_s >= listening_at]
    eject = next((s.t_s for s in after_kill if s.states.get(victim, "healthy") != "healthy"), None)
    healthy = next((s.t_s for s in after_restart if s.states.get(victim) == "healthy"), None)
    first = min((r.sent_s for r in results if r.ok and r.endpoint == victim
                 and r.sent_s >= listening_at), default=None)  # fmt: skip
    figures = KillFigures(
        policy=policy, endpoint=victim, requests=len(results), failed=failed,
        failed_share=round(failed / len(results), 4) if results else 0.0,
        killed_at_s=round(killed_at, 2), restarted_at_s=round(listening_at, 2),
        eject_after_s=None if eject is None else round(eject - killed_at, 2),
        healthy_after_s=None if healthy is None else round(healthy - listening_at, 2),
        first_request_after_s=None if first is None else round(first - listening_at, 2),
        probe_interval_s=PROBE_INTERVAL_S,
    )  # fmt: skip
    names = sorted(running.urls())
    timeline = {"endpoints": names, "t_s": [round(s.t_s, 2) for s in sampler.samples],
                "in_flight": [s.in_flight for s in sampler.samples]}  # fmt: skip
    return figures, timeline


async def _drive_kill(
    running: _Stack, conversations: list[Conversation], kill_at_s: float
) -> tuple[Any, Sampler, tuple[float, float]]:
    t0 = time.perf_counter()
    sampler = Sampler(running.urls, running.gateway.url, t0, interval_s=0.05)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    load = asyncio.create_task(run_conversations(running.gateway.url, conversations, t0))
    await asyncio.sleep(kill_at_s)
    killed_at = time.perf_counter() - t0
    running.kill(1)
    await asyncio.sleep(running.args.restart_after_s)
    await asyncio.to_thread(running.restart, 1)
    listening_at = time.perf_counter() - t0
    results = await load
    stop.set()
    await sampling
    return results, sampler, (killed_at, listening_at)
