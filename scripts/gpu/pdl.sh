#!/usr/bin/env bash
# GPU call 1 of 3 (2026-12-02): programmatic dependent launch (every kernel launched with
# programmatic stream serialization, each entering through pdl_enter(); TALLY_PDL=off is the
# old launch), and the converter-made fixtures on CUDA with this session's kernels.
#   1. prepare.sh in the background (llama.cpp's CUDA build; the 35B Q4_K_M file, --fill pool).
#   2. The converter fixtures on CUDA (scripts/gpu/converter.sh: node by node against the CPU).
#   3. `tally check --backend cuda` (poisoned, node by node) on tiny q4_k_m, mid q4_k_m and
#      mid q8_0: the check dispatches node by node, with PDL on.
#   4. PDL changes no bit: logits digests of a prefill and 6 decode steps with and without
#      TALLY_PDL=off (tiny, mid q4_k_m, mid q8_0, the 4-layer 35B-shaped file); greedy tokens
#      CPU == CUDA on mid q4_k_m.
#   5. tg128 on the 4-layer file, PDL against TALLY_PDL=off, alternated twice (a quick A/B;
#      the full model side by side is call 2, sbs-pdl.sh).
# Everything under /tmp/o comes back as $OUT/pdl.tgz. Call 2 within 30 s.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
REAL_OUT=$OUT
export OUT=/tmp/o; mkdir -p $OUT
T=$TALLY_NOPEER
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
left() { [ $(( $(date +%s) - t0 )) -lt 480 ] || { row "skipped (time)" "$1"; return 1; }; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,utilization.gpu,driver_version --format=csv > "$OUT/gpu.txt"
( FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.txt" 2>&1 ) &
prep=$!
TALLY=$T timeout 200 scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1; rc=$?
row "converter fixtures on CUDA" "rc=$rc"
for spec in "tiny q4_k_m 3 1,37,100" "mid q4_k_m 4 1,100,700" "mid q8_0 5 1,300"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  left "check $1 $2" || continue
  timeout 150 "$T" check --model "$f" --backend cuda --tokens "$4" -n 4 > "$OUT/check-$1-$2.txt" 2>&1; rc=$?
  row "check $1 $2 (poisoned, PDL on)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done
M=/tmp/l4.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out "$M" > "$OUT/l4-synth.txt" 2>&1
row "l4 synth (pool)" "$(( $(date +%s) - t0 )) s since start"
for f in /tmp/tiny-q4_k_m.gguf /tmp/mid-q4_k_m.gguf /tmp/mid-q8_0.gguf "$M"; do
  n=$(basename "$f" .gguf)
  left "digests $n" || continue
  timeout 120 "$T" run --model "$f" --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-$n-pdl.json" 2> "$OUT/run-$n-pdl.err"
  TALLY_PDL=off timeout 120 "$T" run --model "$f" --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-$n-nopdl.json" 2> "$OUT/run-$n-nopdl.err"
  row "PDL == no PDL logits bits, $n" "$(python3 - "$OUT" "$n" <<'PY'
import json, sys
o, n = sys.argv[1:]
try:
    a, b = (json.load(open(f"{o}/run-{n}-{s}.json"))["logits_digests"] for s in ("pdl", "nopdl"))
    print("same (7 steps)" if a == b and len(a) == 7 else f"DIFFER at {[i for i, (x, y) in enumerate(zip(a, b)) if x != y]}")
except Exception as e:
    print("ERROR", e)
PY
)"
done
V=crates/text/tests/data/tiny.gguf
for be in cpu cuda; do
  timeout 120 "$T" generate --model /tmp/mid-q4_k_m.gguf --tokenizer $V --backend $be --prompt "The quick brown fox" \
    --temp 0 -n 48 --ignore-eos -o json > "$OUT/gen-mid-$be.json" 2> "$OUT/gen-mid-$be.err"
done
row "greedy mid q4_k_m cpu == cuda (PDL on)" "$(python3 -c "
import json
a, b = (json.load(open('$OUT/gen-mid-%s.json' % s))['tokens'] for s in ('cpu', 'cuda'))
print('same' if a == b else 'DIFFER')" 2>&1 | tail -1)"
for i in 1 2; do
  for mode in pdl nopdl; do
    left "bench l4 $mode $i" || continue
    if [ $mode = nopdl ]; then export TALLY_PDL=off; else unset TALLY_PDL; fi
    timeout 60 "$T" bench -m "$M" --backend cuda -p 512 -n 128 -r 5 -o md --out-dir "$OUT/bench-l4-$mode-$i" \
      > "$OUT/bench-l4-$mode-$i.md" 2>&1
    row "l4 bench $mode #$i" "$(grep -E '^\| qwen' "$OUT/bench-l4-$mode-$i.md" | awk -F'|' '{printf "%s %s; ", $(NF-2), $(NF-1)}')"
  done
done
unset TALLY_PDL
while kill -0 $prep 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 575 ]; do sleep 2; done
kill -0 $prep 2>/dev/null && row "prepare" "STILL RUNNING at 575 s (call 2 completes it)"
tail -3 "$OUT/prepare.txt"
grep -E "^(conv|==)" "$OUT/converter.txt" | tail -12
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
tar czf "$REAL_OUT/pdl.tgz" -C /tmp o
