"""Request logs with audits, built through the public API (the request log, the verdict store),
and a gateway config pointing at them: for the --from-log commands and the router update."""

from __future__ import annotations

from pathlib import Path

from hybrid_gateway.learning.store import AuditRow, SqliteVerdictStore
from hybrid_gateway.observability.request_log import SqliteRequestLog
from hybrid_gateway.types import RequestRecord, RouteDecision, Usage

SIMPLE = ["How do I install the client?", "Where do I set my password?",
          "What is the default port?", "How do I reset my account?",
          "Where is the settings page?", "How do I change the language?"]  # fmt: skip
COMPLEX = ["Prove that the square root of two is irrational.",
           "Derive the closed form of the sum of the first n cubes and prove it by induction.",
           "Why is the halting problem undecidable? Give the diagonal argument in full.",
           "Compare the worst-case time complexity of quicksort and heapsort and explain why.",
           "Show that every group of order p^2 is abelian, step by step.",
           "Prove that there are infinitely many primes congruent to 3 mod 4."]  # fmt: skip


def write_config(folder: Path, *, prompts: str = "full", extra: str = "") -> Path:
    """A gateway config whose request log is ``folder/requests.sqlite3``."""
    path = folder / "gateway.yaml"
    path.write_text(
        "channels:\n"
        "  small: {base_url: 'http://127.0.0.1:9/v1', model: s, price_per_1m_input: 0.1,"
        " price_per_1m_output: 0.1}\n"
        "  big: {base_url: 'http://127.0.0.1:9/v1', model: b, price_per_1m_input: 1.0,"
        " price_per_1m_output: 1.0}\n"
        "lanes: {light: {channel: small}, heavy: {channel: big}}\n"
        "routing:\n  classifier: {model: default, threshold: 0.5}\n"
        f"server: {{request_log: {{path: {folder / 'requests.sqlite3'}, prompts: {prompts}}}}}\n"
        + extra
    )
    return path


def router_row(n: int, at: float, prompt: str | None, verdict: str | None) -> AuditRow:
    return AuditRow(f"req_r{n}", at, "acme", "router", "marks", None, verdict, None, "light",
                    "heavy", None, None, 0.001, prompt)  # fmt: skip


def cache_row(n: int, at: float, prompt: str | None, cached: str | None, same: bool) -> AuditRow:
    verdict = "equivalent" if same else "a_worse"
    return AuditRow(f"req_c{n}", at, "acme", "cache", "marks", None, verdict, None, None,
                    "light", 0.95, "tenant:acme", 0.001, prompt, cached)  # fmt: skip


def request(request_id: str, at: float, category: str) -> RequestRecord:
    return RequestRecord(
        request_id=request_id, started_at=at, model="auto", tenant="acme", app="web",
        cache_key="k" * 16, route=RouteDecision("light", "small", "classifier", 0.2, 0.5),
        usage=Usage(prompt_tokens=12, completion_tokens=30), cost_usd=0.0, latency_ms=1.0,
        extra={"category": category},
    )  # fmt: skip


async def write_router_audits(
    log: Path, start: float, count: int, *, prompts: bool = True, light_fine: bool = False
) -> None:
    """``count`` router audits from ``start`` (one a second): the simple questions' light
    answer as good as heavy's, the complex ones' worse (``light_fine``: every one as good)."""
    requests = SqliteRequestLog(log)
    store = SqliteVerdictStore(log)
    for n in range(count):
        simple = n % 2 == 0
        text = (SIMPLE if simple else COMPLEX)[(n // 2) % 6] + f" ({start:.0f}-{n})"
        verdict = "equivalent" if simple or light_fine else "a_worse"
        requests.write(request(f"req_r{n}", start + n, "faq" if simple else "maths"))
        await store.save(router_row(n, start + n, text if prompts else None, verdict))
    requests.close()
    await store.aclose()


async def write_cache_audits(log: Path, start: float, count: int, *, prompts: bool = True) -> None:
    """Paraphrases (the same question reworded) are right hits, other questions false ones."""
    SqliteRequestLog(log).close()
    store = SqliteVerdictStore(log)
    for n in range(count):
        base = SIMPLE[n % 6]
        same = n % 3 != 0
        cached = f"{base} please" if same else SIMPLE[(n + 1) % 6]
        await store.save(cache_row(n, start + n, f"{base} ({n})" if prompts else None,
                                   cached if prompts else None, same))  # fmt: skip
    await store.aclose()
