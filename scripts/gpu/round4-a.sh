#!/usr/bin/env bash
# GPU call 1 of 2 (2026-12-01, third session, after the arena / snapshot / check fixes).
#   1. Cold start on an idle host, before anything else runs: `tally run` on tiny q8_0 with an
#      empty kernel cache, then warm, for the binary before the CUDA reshape (4d0d3f2,
#      .carry/bin/tally-before) and for this one, alternating, twice each.
#   2. prepare.sh in the background (llama.cpp's CUDA build + the 35B Q4_K_M synth file).
#   3. Meanwhile: `tally check --backend cuda` (poisoned) on tiny q4_k_m (the decode context now
#      prefilled with the CPU's routing), tiny-odd bf16 and mid q4_k_m (the arena now keeps
#      several plans' buffers); speculative greedy decoding on mid through the new arena (the
#      bench's spec row fails if its tokens differ from plain greedy); `tally measure` on mid
#      (the probe check: dispatches = work nodes).
# The correctness runs pass --busy-limit 64: llama.cpp's build keeps the host's cores busy, and
# the noise gate would otherwise refuse every window (as it did on 2026-12-01).
# Everything under /tmp/o comes back as $OUT/r4a.tgz. Call 2 (round4-b.sh) within 30 s.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
REAL_OUT=$OUT
export OUT=/tmp/o; mkdir -p $OUT
T=$TALLY_NOPEER
B=$PWD/.carry/bin/tally-before
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-40s %s' "$1" "$2")"); }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,utilization.gpu --format=csv > "$OUT/gpu.txt"
"$T" synth --preset tiny --quant q8_0 --seed 1 --out /tmp/tiny-q8_0.gguf > /dev/null 2>&1
load_ms() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['load_ms']))" "$1" 2>/dev/null || echo "?"; }
for rep in 1 2; do
  for which in before after; do
    bin=$T; [ $which = before ] && bin=$B
    c=$(mktemp -d)
    for state in cold warm; do
      TALLY_CACHE=$c timeout 120 "$bin" run --model /tmp/tiny-q8_0.gguf --backend cuda --tokens 4 -o json \
        > "$OUT/start-$which-$state-$rep.json" 2> "$OUT/start-$which-$state-$rep.err"
      row "start $which $state #$rep load_ms" "$(load_ms "$OUT/start-$which-$state-$rep.json")"
    done
  done
done
( scripts/gpu/prepare.sh > "$OUT/prepare.txt" 2>&1 ) &
prep=$!
for spec in "tiny q4_k_m 3 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,700"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout 150 "$T" check --model "$f" --backend cuda --tokens "$4" -n 3 > "$OUT/check-$1-$2.txt" 2>&1; rc=$?
  row "check $1 $2 (poisoned)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done
tail -9 "$OUT/check-tiny-q4_k_m.txt"
for acc in 0.6 1.0; do
  timeout 100 "$T" bench -m /tmp/mid-q4_k_m.gguf --backend cuda -p 1 -n 64 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance $acc --busy-limit 64 --out-dir "$OUT/spec-mid-$acc" -o md > "$OUT/spec-mid-$acc.md" 2>&1; rc=$?
  row "spec greedy = plain, mid, acc $acc" "rc=$rc $(grep -o '[0-9.]*x; per window' "$OUT/spec-mid-$acc.md")"
done
timeout 120 "$T" measure --model /tmp/mid-q4_k_m.gguf --backend cuda -p 512 -r 3 --busy-limit 64 --out-dir "$OUT/measure-mid" \
  > "$OUT/measure-mid.txt" 2>&1; rc=$?
row "measure mid pp512 (probe check)" "rc=$rc $(grep -io 'probe[^.]*' "$OUT/measure-mid.txt" | head -1)"
wait $prep
tail -3 "$OUT/prepare.txt"
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
tar czf "$REAL_OUT/r4a.tgz" -C /tmp o
