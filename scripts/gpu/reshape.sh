#!/usr/bin/env bash
# One call on a fresh GPU machine (under 10 minutes) that checks the reshaped CUDA backend
# (issue 12): position as device data, one decode graph for every position, probes that can fail.
# Carry: .carry/bin (scripts/gpu/pack.sh). Writes $OUT/reshape-*; prints a summary table last.
# Steps, and what each proves:
#   1. `tally check --backend cuda` on tiny q8_0, tiny-odd bf16, mid q4_k_m: every node against
#      the CPU with every activation and scratch buffer poisoned with NaN before each run (an
#      unwritten output fails), decode steps at several positions through the one-token plan,
#      and the captured prefill graph's kernel nodes = the launches of its capture
#      (`graph_missing` 0 in the JSON).
#   2. greedy decode of 64 tokens after a 100-token prompt: the CPU, CUDA with the decode graph
#      (default: captured once, relaunched at positions 100..163) and CUDA without graphs
#      (TALLY_NO_GRAPH=1) must give the same tokens (tiny-odd; mid: CUDA graph vs no graph).
#   3. the probe check: `tally measure` on mid reports probe completeness (plain runs are graph
#      runs whose dispatch count comes from the graph's kernel nodes; a lost launch makes it
#      INCOMPLETE).
#   4. cold start: `tally run` with an empty kernel cache and again with it warm (load_ms: NVRTC
#      compile of every loaded kernel + weight upload; the difference is the compile).
#   5. the 35B-A3B Q4_K_M synth file: `tally bench` pp512 + tg128 with the defaults (decode graph
#      on), then with TALLY_NO_GRAPH=decode; then pp512 with TALLY_GEMM=cublas.
#      Previous numbers (main at 4d0d3f2): tg128 91.6 tok/s (105.7 with the old
#      TALLY_DECODE_GRAPH=1 segments), pp512 8,143 tok/s, cuBLAS pp512 10,185 tok/s.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T=$TALLY_NOPEER
BIG=${BIG:-/tmp/q4km.gguf}
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
[ -f "$BIG" ] || ( "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --out "$BIG" > /dev/null 2>&1 ) &

# 1. check, poisoned, with the graph count.
for spec in "tiny q8_0 1 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,600"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout 150 "$T" check --model "$f" --backend cuda --tokens "$4" -n 4 -o json \
    > "$OUT/reshape-check-$1.json" 2> "$OUT/reshape-check-$1.err"; rc=$?
  tail -3 "$OUT/reshape-check-$1.err"
  g=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' '.join(f\"{c['tokens']}:{c.get('graph_kernel_nodes')}/{c.get('graph_launches')}/missing={c.get('graph_missing')}\" for c in d['cases'] if c.get('graph_kernel_nodes') is not None))" "$OUT/reshape-check-$1.json" 2>/dev/null)
  row "check $1 $2 (poisoned)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc") graphs nodes/launches: $g"
done

# 2. greedy tokens: CPU vs CUDA graph vs CUDA without graphs.
run() { timeout 120 "$T" run --model "$1" --backend "$2" --tokens 100 -n 64 -o json > "$3" 2>&1; }
run /tmp/tiny-odd-bf16.gguf cpu "$OUT/reshape-run-cpu.json"
run /tmp/tiny-odd-bf16.gguf cuda "$OUT/reshape-run-graph.json"
TALLY_NO_GRAPH=1 run /tmp/tiny-odd-bf16.gguf cuda "$OUT/reshape-run-nograph.json"
run /tmp/mid-q4_k_m.gguf cuda "$OUT/reshape-run-mid-graph.json"
TALLY_NO_GRAPH=1 run /tmp/mid-q4_k_m.gguf cuda "$OUT/reshape-run-mid-nograph.json"
greedy=$(python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
def d(n): return json.load(open(f"{o}/reshape-run-{n}.json"))
def same(a, b):
    x, y = d(a)["decoded"], d(b)["decoded"]
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
    return "identical" if n is None and len(x) == len(y) else f"DIFFER from token {n}"
print(f"tiny-odd cpu/graph {same('cpu', 'graph')}, graph/no-graph {same('graph', 'nograph')}; "
      f"mid graph/no-graph {same('mid-graph', 'mid-nograph')} "
      f"({d('mid-nograph')['decode_tokens_per_s']:.0f} -> {d('mid-graph')['decode_tokens_per_s']:.0f} tok/s)")
PY
)
row "greedy 64 tokens after 100" "$greedy"

# 3. the probe check (dispatches of plain runs = work nodes).
timeout 150 "$T" measure --model /tmp/mid-q4_k_m.gguf --backend cuda -p 100 -r 3 --out-dir /tmp/reshape-op \
  > "$OUT/reshape-measure.txt" 2>&1; rc=$?
cp /tmp/reshape-op/*.json "$OUT/" 2>/dev/null
row "probe check (measure mid pp100)" "rc=$rc $(grep -rihE -m2 'probe' "$OUT/reshape-measure.txt" /tmp/reshape-op 2>/dev/null | head -2 | cut -c1-120 | tr '\n' ' ')"

# 4. cold start: empty kernel cache, then warm.
cold=$(mktemp -d)
for c in cold warm; do
  TALLY_CACHE=$cold timeout 120 "$T" run --model /tmp/tiny-q8_0.gguf --backend cuda --tokens 4 -o json \
    > "$OUT/reshape-start-$c.json" 2>&1
done
row "cold start (load_ms cold, warm)" "$(python3 -c "import json,sys; print(*(round(json.load(open(f'$OUT/reshape-start-{c}.json'))['load_ms']) for c in ('cold','warm')))" 2>/dev/null)"

# While the 35B synth runs: the converter-made fixtures through the CUDA backend (CONVERTER=1).
if [ "${CONVERTER:-0}" = 1 ]; then
  scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1; rc=$?
  tail -12 "$OUT/converter.txt"
  row "converter fixtures (tally check cuda)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
fi

# 5. the 35B bench.
wait
for round in 1; do
  for mode in graph nograph; do
    if [ $mode = nograph ]; then export TALLY_NO_GRAPH=decode; else unset TALLY_NO_GRAPH; fi
    timeout 100 "$T" bench --model "$BIG" --backend cuda -p 512 -n 128 -r 5 \
      --out-dir "/tmp/reshape-$mode-$round" > "$OUT/reshape-bench-$mode-$round.txt" 2>&1
    echo "bench $mode round $round rc=$?"
  done
done
unset TALLY_NO_GRAPH
TALLY_GEMM=cublas timeout 80 "$T" bench --model "$BIG" --backend cuda -p 512 -n 0 -r 5 \
  --out-dir /tmp/reshape-cublas > "$OUT/reshape-bench-cublas.txt" 2>&1
for f in "$OUT"/reshape-bench-*.txt; do echo "== $(basename "$f")"; grep -E "^\| tally" "$f"; done
echo "reshape: $(( $(date +%s) - t0 )) s"
printf '%s\n' "${summary[@]}"
