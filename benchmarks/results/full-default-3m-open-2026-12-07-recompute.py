"""Recompute repeat_ceiling and latency_floor (the warm-up's items counted as asked before) and
goal.held_back from a bench run's JSON and its result files, and re-render its Markdown.

Used once, for full-default-3m-open-2026-12-07: the run was made before the ceiling counted the
warm-up and before the reading's wording was fixed.  Every measured figure stays the run's.

    python full-default-3m-open-2026-12-07-recompute.py RUN.json OUT_STEM calib/measured-24k.jsonl
"""
import json, sys
from pathlib import Path
from hybrid_gateway.tools.bench.floor import engines_of, latency_floor
from hybrid_gateway.tools.bench.held_back import held_back, repeat_ceiling
from hybrid_gateway.tools.bench.report_md import render_markdown
from hybrid_gateway.tools.bench.stages import read_results
from hybrid_gateway.tools.workload.schema import WorkloadItem
src = Path(sys.argv[1]); out = Path(sys.argv[2]); workload = Path(sys.argv[3])
report = json.loads(src.read_text())
items = {}
for line in workload.read_text().splitlines():
    d = json.loads(line)
    if "messages" in d:
        item = WorkloadItem.from_json(line)
        items[item.id] = item
for row in report["results"]:
    measured = Path(row["results_file"])
    warm = measured.with_name(measured.stem + "-warmup.jsonl")
    before = frozenset(r.item for r in read_results(warm)) if warm.exists() else frozenset()
    row["repeat_ceiling"] = repeat_ceiling(read_results(measured), items, before)
    row["latency_floor"] = latency_floor(read_results(measured), items, engines_of(report["emulators"]), before)
goal = report["goal"]
goal["latency_floor"] = next(r for r in report["results"] if r["strategy"] == goal["strategy"] and r["stage"] == goal["stage"])["latency_floor"]
row = next(r for r in report["results"] if r["strategy"] == goal["strategy"] and r["stage"] == goal["stage"])
goal["held_back"] = held_back(report["results"], row)
stem = out.name
plots = [out.parent / f"{stem}-{k}.png" for k in ("latency", "cost", "article")]
(out.parent / f"{stem}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
(out.parent / f"{stem}.md").write_text(render_markdown(report, plots))
print([(r["strategy"], r["repeat_ceiling"], r["latency_floor"]["oracle_p95_s"], r["latency_floor"]["ideal_p95_s"]) for r in report["results"]])
