"""``bench replicas`` figures: per policy, and for the kill-and-restart phase; JSON, Markdown,
plots, and the issue's goals checked against them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from hybrid_gateway.tools.bench.replicas_decision import DecisionCost
from hybrid_gateway.tools.bench.replicas_load import Sample, TurnResult
from hybrid_gateway.tools.bench.stats import percentile

__all__ = ["KillFigures", "PolicyFigures", "policy_figures", "write_report"]


@dataclass(frozen=True, slots=True)
class PolicyFigures:
    policy: str
    requests: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    throughput_rps: float | None
    prefix_hit_rate: float | None  # cached prompt tokens / prompt tokens, all emulators
    imbalance_mean: float | None  # mean over samples of max/mean in-flight
    imbalance_p95: float | None
    # max/mean of each endpoint's in flight averaged over those samples: how unevenly the
    # load fell over the run, without the instants' discreteness (one request more or less)
    imbalance_avg_load: float | None
    requests_by_endpoint: dict[str, int]


@dataclass(frozen=True, slots=True)
class KillFigures:
    policy: str
    endpoint: str
    requests: int
    failed: int
    failed_share: float
    killed_at_s: float
    restarted_at_s: float
    eject_after_s: float | None  # kill -> /healthz no longer "healthy"
    healthy_after_s: float | None  # restart listening -> /healthz "healthy" again
    first_request_after_s: float | None  # restart listening -> its first answered request
    probe_interval_s: float


def _imbalance(samples: Sequence[Sample]) -> list[float]:
    """max/mean in flight over the live replicas, for each sample with at least one request
    per replica in flight (below that, one request more or less is a ratio of 2 or more)."""
    out = []
    for sample in samples:
        loads = [v for v in sample.in_flight.values() if v is not None]
        total = sum(loads)
        if loads and total >= len(loads):
            out.append(max(loads) / (total / len(loads)))
    return out


def _average_imbalance(samples: Sequence[Sample]) -> float | None:
    busy = [s.in_flight for s in samples if None not in s.in_flight.values()]
    busy = [loads for loads in busy if sum(loads.values()) >= len(loads) > 0]  # type: ignore[arg-type]
    if not busy:
        return None
    averages = [sum(loads[name] or 0 for loads in busy) / len(busy) for name in busy[0]]
    mean = sum(averages) / len(averages)
    return max(averages) / mean if mean else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def policy_figures(
    policy: str,
    results: Sequence[TurnResult],
    samples: Sequence[Sample],
    stats: Mapping[str, Mapping[str, Any]],
) -> PolicyFigures:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    e2e = [r.latency_ms for r in ok]
    span = max((r.sent_s + r.latency_ms / 1000 for r in results), default=0.0) - min(
        (r.sent_s for r in results), default=0.0
    )
    hit = sum(int(s.get("prefix_hit_tokens", 0)) for s in stats.values())
    looked = sum(int(s.get("prefix_lookup_tokens", 0)) for s in stats.values())
    ratios = _imbalance(samples)
    by_endpoint: dict[str, int] = {}
    for r in ok:
        by_endpoint[r.endpoint or "?"] = by_endpoint.get(r.endpoint or "?", 0) + 1
    return PolicyFigures(
        policy=policy, requests=len(results), failed=len(results) - len(ok),
        ttft_p50_ms=_round(percentile(ttft, 50)), ttft_p95_ms=_round(percentile(ttft, 95)),
        e2e_p50_ms=_round(percentile(e2e, 50)), e2e_p95_ms=_round(percentile(e2e, 95)),
        throughput_rps=_round(len(ok) / span, 2) if span > 0 else None,
        prefix_hit_rate=round(hit / looked, 3) if looked else None,
        imbalance_mean=_round(sum(ratios) / len(ratios), 2) if ratios else None,
        imbalance_p95=_round(percentile(ratios, 95), 2),
        imbalance_avg_load=_round(_average_imbalance(samples), 2),
        requests_by_endpoint=dict(sorted(by_endpoint.items())),
    )  # fmt: skip


def goals(
    figures: Sequence[PolicyFigures], kill: KillFigures | None, costs: Sequence[DecisionCost]
) -> list[dict[str, Any]]:
    """Issue 22's goals, each with the measured value and whether it is met."""
    by = {f.policy: f for f in figures}
    out: list[dict[str, Any]] = []

    def add(goal: str, value: float | None, met: bool | None) -> None:
        out.append({"goal": goal, "value": value, "met": met})

    rr, pa = by.get("round_robin"), by.get("prefix_affinity")
    if rr and pa and rr.ttft_p50_ms and pa.ttft_p50_ms is not None:
        ratio = round(pa.ttft_p50_ms / rr.ttft_p50_ms, 3)
        add("prefix_affinity TTFT p50 <= 0.4x round_robin", ratio, ratio <= 0.4)
    if rr and pa and rr.throughput_rps and pa.throughput_rps:
        ratio = round(pa.throughput_rps / rr.throughput_rps, 3)
        add("prefix_affinity throughput >= round_robin", ratio, ratio >= 0.99)
    if pa and pa.imbalance_mean is not None:
        add("prefix_affinity in-flight max/mean <= 1.5", pa.imbalance_mean,
            pa.imbalance_mean <= 1.5)  # fmt: skip
    if kill is not None:
        add("one replica killed: < 0.5 % of requests fail", kill.failed_share,
            kill.failed_share < 0.005)  # fmt: skip
        eject = kill.eject_after_s
        add("ejected within 2 s", eject, eject is not None and eject <= 2.0)
        back = kill.healthy_after_s
        add("taken back within one probe after it recovers", back,
            back is not None and back <= kill.probe_interval_s + 0.2)  # fmt: skip
    for cost in costs:
        add(f"{cost.policy} decision p99 <= 50 us at {cost.endpoints} endpoints (CPU time)",
            cost.cpu_p99_us, cost.cpu_p99_us <= 50.0)  # fmt: skip
        best = f"best of {cost.replays} replays"
        add(f"{cost.policy} decision p99 <= 50 us at {cost.endpoints} endpoints (CPU time, "
            f"{best})", cost.best_p99_us, cost.best_p99_us <= 50.0)  # fmt: skip
    return out


def write_report(out: Path, report: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "replicas.json", out / "replicas.md"
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    md_path.write_text(markdown(report), encoding="utf-8")
    return [json_path, md_path, *_plots(report, out)]


def as_dict(value: Any) -> Any:
    return asdict(value) if value is not None else None


def markdown(report: Mapping[str, Any]) -> str:
    lines = ["# bench replicas", "", f"`{report['command']}`", "",
             f"Settings: {report['settings']}", "",
             "| policy | requests | failed | TTFT p50 ms | TTFT p95 ms | e2e p50 ms | e2e p95 ms "
             "| req/s | prefix hit rate | in-flight max/mean (mean, p95) "
             "| max/mean of average in-flight | per endpoint |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for f in report["policies"]:
        lines.append(
            f"| {f['policy']} | {f['requests']} | {f['failed']} | {f['ttft_p50_ms']} "
            f"| {f['ttft_p95_ms']} | {f['e2e_p50_ms']} | {f['e2e_p95_ms']} "
            f"| {f['throughput_rps']} | {f['prefix_hit_rate']} "
            f"| {f['imbalance_mean']}, {f['imbalance_p95']} | {f.get('imbalance_avg_load')} "
            f"| {f['requests_by_endpoint']} |"
        )
    kill = report.get("kill")
    if kill:
        first = kill["first_request_after_s"]
        first_text = ("no request was sent to it afterwards" if first is None
                      else f"its first request {first} s after it listened")  # fmt: skip
        lines += ["", f"Kill and restart ({kill['policy']}): endpoint {kill['endpoint']} "
                  f"SIGKILLed at {kill['killed_at_s']} s, started again at "
                  f"{kill['restarted_at_s']} s. {kill['failed']} of {kill['requests']} requests "
                  f"failed ({kill['failed_share']:.2%}); ejected after {kill['eject_after_s']} s; "
                  f"healthy again {kill['healthy_after_s']} s after it listened (active check "
                  f"every {kill['probe_interval_s']} s); {first_text}."]  # fmt: skip
    if report.get("decision"):
        lines += ["", "Decision cost (`EndpointPool.pick`, in process; wall time includes time "
                  "the OS gave the CPU to others, CPU time is the decision's own):", "",
                  "| policy | endpoints | decisions | wall p50 us | wall p99 us | CPU p50 us "
                  "| CPU p99 us | best-of-replays CPU p50 / p99 us | prompt chars p50 |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {c['policy']} | {c['endpoints']} | {c['decisions']} | {c['p50_us']} "
            f"| {c['p99_us']} | {c['cpu_p50_us']} | {c['cpu_p99_us']} "
            f"| {c.get('best_p50_us')} / {c.get('best_p99_us')} | {c['prompt_chars_p50']} |"
            for c in report["decision"]
        ]
        lines += ["", "Best of replays: the same decisions replayed on fresh pools, each "
                  "decision's least CPU time (what it costs without other processes' "
                  "interference)."]  # fmt: skip
    lines += ["", "| goal | value | met |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {g['value']} | {g['met']} |" for g in report["goals"]]
    return "\n".join(lines) + "\n"


def _plots(report: Mapping[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the bench extra is not installed: JSON and Markdown only
        return []
    policies = report["policies"]
    names = [p["policy"] for p in policies]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    x = range(len(names))
    axes[0].bar([i - 0.2 for i in x], [p["ttft_p50_ms"] or 0 for p in policies], 0.4, label="p50")
    axes[0].bar([i + 0.2 for i in x], [p["ttft_p95_ms"] or 0 for p in policies], 0.4, label="p95")
    axes[0].set_title("TTFT (ms)")
    axes[0].legend()
    axes[1].bar(list(x), [p["prefix_hit_rate"] or 0 for p in policies])
    axes[1].set_title("prefix-cache hit rate")
    axes[2].bar(list(x), [p["imbalance_mean"] or 0 for p in policies])
    axes[2].set_title("in-flight max/mean")
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=15)
    fig.tight_layout()
    path = out / "replicas.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths = [path]
    timeline = report.get("kill_timeline")
    if timeline:
        fig, ax = plt.subplots(figsize=(10, 4))
        for name in timeline["endpoints"]:
            ax.plot(timeline["t_s"], [row.get(name) for row in timeline["in_flight"]], label=name)
        kill = report["kill"]
        ax.axvline(kill["killed_at_s"], color="red", linestyle="--", label="killed")
        ax.axvline(kill["restarted_at_s"], color="green", linestyle="--", label="restarted")
        ax.set_xlabel("s")
        ax.set_ylabel("in flight")
        ax.legend()
        fig.tight_layout()
        path = out / "replicas-kill.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
