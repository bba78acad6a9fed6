#!/usr/bin/env bash
# Gateway CPU (user + system, and user alone) per pass-through request at wrk -c20, for one
# source tree: the `bench overhead` config (rules + exact cache + request log), a zero-delay
# emulator, every body unique, log level WARNING (LOGLEVEL=INFO: with the request lines), 2 s
# warm-up then 6 s measured.  GC_YOUNG_MS=N sets server.gc.young_interval_ms (default: the
# config's default).  Used to scan commits for what moved the pass-through cost
# (benchmarks/README.md):
#
#   git worktree add /tmp/at COMMIT
#   benchmarks/experiments/passthrough_cpu_probe.sh /tmp/at/src
#
# Needs wrk and curl; runs the interpreter of this checkout's .venv with PYTHONPATH=SRC.
set -euo pipefail
SRC=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
WORK=$(mktemp -d)
cleanup() { kill -TERM "${GW:-}" "${EMU:-}" 2>/dev/null || true; sleep 1; rm -rf "$WORK"; }
trap cleanup EXIT
cd "$WORK"
EPORT=$((20000 + RANDOM % 10000)); GPORT=$((EPORT + 1))
PYTHONPATH=$SRC "$PY" -m hybrid_gateway.cli emulate --profile light --zero-delay \
    --host 127.0.0.1 --port "$EPORT" > emu.log 2>&1 & EMU=$!
cat > g.yaml <<YAML
server: {host: 127.0.0.1, port: $GPORT, request_log: {path: requests.sqlite3}${GC_YOUNG_MS:+, gc: {young_interval_ms: $GC_YOUNG_MS\}}}
channels:
  light-emu: {base_url: "http://127.0.0.1:$EPORT/v1", model: light-model, price_per_1m_input: 0.1, price_per_1m_output: 0.2, max_concurrency: 256}
  heavy-emu: {base_url: "http://127.0.0.1:$EPORT/v1", model: heavy-model, price_per_1m_input: 1.0, price_per_1m_output: 2.0, max_concurrency: 256}
lanes: {light: {channel: light-emu}, heavy: {channel: heavy-emu}}
routing: {default_lane: heavy, rules: [{name: short-question, when: {max_chars: 200}, lane: light}]}
cache: {exact: {enabled: true, ttl_s: 600, max_entries: 10000}}
YAML
# A fresh script (a fresh token) for each wrk run: the measured run must not repeat the
# warm-up's bodies, which the exact cache would answer (before 2026-12-04 it did, for about a
# quarter of the measured requests: the figures in benchmarks/README.md up to then).
script() {
    PYTHONPATH=$HERE/src "$PY" -c "
from hybrid_gateway.tools.overhead.wrk import lua_script
open('s.lua', 'w').write(lua_script())"
}
sleep 2
PYTHONPATH=$SRC "$PY" -m hybrid_gateway.cli serve --config g.yaml --log-level "${LOGLEVEL:-WARNING}" > gw.log 2>&1 & GW=$!
for _ in $(seq 1 60); do curl -s -o /dev/null "http://127.0.0.1:$GPORT/healthz" && break; sleep 0.25; done
script; wrk -t2 -c20 -d2s -s s.lua "http://127.0.0.1:$GPORT" > /dev/null 2>&1
script
read -r U0 S0 < <(awk '{print $14, $15}' "/proc/$GW/stat")
wrk -t2 -c20 -d6s -s s.lua "http://127.0.0.1:$GPORT" > wrk.txt 2>&1
read -r U1 S1 < <(awk '{print $14, $15}' "/proc/$GW/stat")
N=$(grep -o '"requests": [0-9]*' wrk.txt | grep -o '[0-9]*$')
TICK=$(getconf CLK_TCK)
python3 -c "
n, t = $N, $TICK
print(f'cpu_ms_per_req={(($U1-$U0)+($S1-$S0))/t*1000/n:.3f} user_ms_per_req={($U1-$U0)/t*1000/n:.3f} requests={n}')"
