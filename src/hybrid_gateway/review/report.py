"""The review as one JSON object, and the Markdown and HTML pages rendered from it.

The HTML page is self-contained (inline CSS, no scripts, no external assets): it opens from a
file on a machine without network access, and can be attached to a ticket as is.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_gateway.review.analysis import Review

EXAMPLES = 5  # questions shown per cluster
_EFFECT = ("flagged_fixed", "collateral", "heavy_share_before", "heavy_share_after",
           "cost_before_usd", "cost_after_usd")  # fmt: skip


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def as_json(review: Review) -> dict[str, Any]:
    found = review.collection
    by_cluster: dict[int, list[int]] = {}
    for ranked in review.ranked:
        for c in ranked.proposal.clusters:
            by_cluster.setdefault(c, []).append(ranked.number)
    return {
        "object": "misroute_review",
        "config": str(review.config_path),
        "since": _when(found.since),
        "until": _when(found.until),
        "prompts": found.mode,
        "requests": len(found.requests),
        "flagged": len(found.flagged),
        "thumbs_down": found.thumbs_down,
        "re_asks": found.re_asks,
        "cluster_similarity": review.cluster_similarity,
        "baseline": review.baseline.as_json() if review.baseline else None,
        "clusters": [
            {
                "number": c.number,
                "size": len(c.members),
                "reasons": dict(c.reasons()),
                "decisions": dict(c.decisions()),
                "categories": dict(c.categories()),
                "examples": [f.request.prompt for f in c.members[:EXAMPLES]],
                "proposals": by_cluster.get(c.number, []),
            }
            for c in review.clusters
        ],
        "proposals": [
            {
                "number": r.number,
                "kind": r.proposal.kind,
                "title": r.proposal.title,
                "clusters": list(r.proposal.clusters),
                "keywords": [
                    {"text": k.text, "in_cluster": k.in_cluster, "in_unflagged": k.in_other}
                    for k in r.proposal.keywords
                ],
                "edits": [e.as_json() for e in r.proposal.edits],
                "effect": r.effect.as_json() if r.effect else None,
            }
            for r in review.ranked
        ],
        "notes": list(review.notes),
    }


def apply_command(data: dict[str, Any]) -> str:
    """The command that applies proposal N of this very review: the same window, given as
    dates, so traffic logged after the report cannot renumber the proposals."""
    since, until = data["since"], data["until"]
    return (
        f"hybrid-gateway misroutes --config {data['config']} --since {since} --until {until} "
        "--apply N"
    )


def _pct(x: Any) -> str:
    return f"{float(x):.1%}"


def _usd(x: Any) -> str:
    return f"${float(x):.4f}"


def _effect_cells(effect: dict[str, Any] | None) -> list[str]:
    if effect is None:
        return ["-", "-", "not replayed", "not replayed"]
    return [
        str(effect["flagged_fixed"]),
        str(effect["collateral"]),
        f"{_pct(effect['heavy_share_before'])} -> {_pct(effect['heavy_share_after'])}",
        f"{_usd(effect['cost_before_usd'])} -> {_usd(effect['cost_after_usd'])}",
    ]


_HEAD = ["#", "change", "clusters", "flagged fixed", "collateral", "heavy share", "cost"]


def _summary(data: dict[str, Any]) -> list[str]:
    return [
        f"Window {data['since']} .. {data['until']}; prompts stored: {data['prompts']}.",
        f"{data['requests']} answered requests, {data['flagged']} flagged "
        f"({data['thumbs_down']} thumbs-down, {data['re_asks']} re-asked within a minute), "
        f"{len(data['clusters'])} clusters (cosine >= {data['cluster_similarity']}).",
    ]


def _rows(data: dict[str, Any]) -> list[list[str]]:
    return [[str(p["number"]), p["title"], ", ".join(map(str, p["clusters"])),
             *_effect_cells(p["effect"])] for p in data["proposals"]]  # fmt: skip


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in counts.items())


def markdown(data: dict[str, Any]) -> str:
    out = ["# Misroute review", "", *_summary(data), ""]
    out += ["## Proposals (ranked by flagged fixed minus collateral)", ""]
    if data["proposals"]:
        out += ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in _rows(data)]
        out += ["", f"Apply one: `{apply_command(data)}` (keeps `<config>.bak`), then reload "
                "the gateway (`SIGHUP` or `POST /admin/reload`)."]  # fmt: skip
    else:
        out.append("No change proposed.")
    out += ["", "## Clusters", ""]
    for c in data["clusters"]:
        proposals = ", ".join(f"#{n}" for n in c["proposals"]) or "none"
        out += [f"### Cluster {c['number']}: {c['size']} flagged (proposals: {proposals})", ""]
        out.append("- reasons: " + ", ".join(f"{k} {v}" for k, v in c["reasons"].items()))
        out.append("- sent by: " + _counts(c["decisions"]))
        if c["categories"]:
            out.append("- categories: " + _counts(c["categories"]))
        out += ["- examples:", *(f"  - {e}" for e in c["examples"] if e is not None), ""]
    if data["notes"]:
        out += ["## Notes", "", *(f"- {n}" for n in data["notes"]), ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:70rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;
text-align:left;vertical-align:top}th{background:#f3f3f3}code{background:#f3f3f3;padding:0 .2rem}
.cluster{border-left:3px solid #888;padding-left:1rem;margin:1rem 0}"""


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)  # fmt: skip
    return f"<table><tr>{cells}</tr>{body}</table>"


def html_page(data: dict[str, Any]) -> str:
    e = html.escape
    parts = ["<h1>Misroute review</h1>", *(f"<p>{e(line)}</p>" for line in _summary(data))]
    parts.append("<h2>Proposals (ranked by flagged fixed minus collateral)</h2>")
    parts.append(_table(_HEAD, _rows(data)) if data["proposals"] else "<p>No change proposed.</p>")
    parts.append("<h2>Clusters</h2>")
    for c in data["clusters"]:
        examples = "".join(f"<li>{e(x)}</li>" for x in c["examples"] if x is not None)
        parts.append(
            f"<div class='cluster'><h3>Cluster {c['number']}: {c['size']} flagged</h3>"
            f"<p>reasons: {e(', '.join(f'{k} {v}' for k, v in c['reasons'].items()))}</p>"
            f"<p>sent by: {e(_counts(c['decisions']))}</p>"
            f"<p>categories: {e(_counts(c['categories']) or 'none declared')}</p>"
            f"<p>proposals: {e(', '.join(f'#{n}' for n in c['proposals']) or 'none')}</p>"
            f"<ul>{examples}</ul></div>"
        )
    if data["notes"]:
        parts.append(
            "<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in data["notes"]) + "</ul>"
        )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Misroute review"
        f"</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def write_report(out: Path, data: dict[str, Any]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / "misroutes.md", out / "misroutes.html"
    md.write_text(markdown(data), encoding="utf-8")
    page.write_text(html_page(data), encoding="utf-8")
    return md, page
