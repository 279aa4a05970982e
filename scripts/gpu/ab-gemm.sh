#!/usr/bin/env bash
# One call on a fresh GPU machine: the opt-in cuBLAS path of dense projections
# (TALLY_GEMM=cublas) checked and measured against the engine's own GEMM kernels.
#   1. `tally check` (every node against the CPU) with the cuBLAS path forced on for every
#      projection of at least 16 rows, on tiny, tiny-odd (layout 1 q/gate split, bf16) and mid;
#   2. the 35B-A3B Q4_K_M synth file, then `tally bench` pp512/pp2048/pp8192 for the two paths,
#      alternated A B A B (the env is read when the backend opens, so each is its own process);
#   3. `tally opbench` of the dense and shared-expert rows on both paths.
# Carry: .carry/bin (scripts/gpu/pack.sh). Writes $OUT/ab-*.txt; prints a short table last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
BIG=${BIG:-/tmp/q4km.gguf}
t0=$(date +%s)
[ -f "$BIG" ] || ( "$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --out "$BIG" > /dev/null 2>&1 ) &
for spec in "tiny q8_0 1 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,600"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$TALLY_NOPEER" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  TALLY_GEMM=cublas TALLY_GEMM_CUBLAS_MIN_M=16 timeout 120 "$TALLY_NOPEER" check --model "$f" --backend cuda \
    --tokens "$4" -n 2 > "$OUT/ab-check-$1.txt" 2>&1
  echo "check (cublas) $1 $2 rc=$?"; tail -8 "$OUT/ab-check-$1.txt"
done
wait
for round in 1 2; do
  for mode in own cublas; do
    env $([ $mode = cublas ] && echo TALLY_GEMM=cublas) timeout 120 "$TALLY_NOPEER" bench --model "$BIG" \
      --backend cuda -p 512,2048,8192 -n 0 -r 5 --out-dir "/tmp/ab-$mode-$round" > "$OUT/ab-bench-$mode-$round.txt" 2>&1
    echo "bench $mode round $round rc=$?"
  done
done
for mode in own cublas; do
  env $([ $mode = cublas ] && echo TALLY_GEMM=cublas) timeout 120 "$TALLY_NOPEER" opbench --model "$BIG" \
    --backend cuda -p 512 --out-dir "/tmp/ab-op-$mode" > "$OUT/ab-opbench-$mode.txt" 2>&1
  echo "opbench $mode rc=$?"
done
echo "ab-gemm: $(( $(date +%s) - t0 )) s"
for f in "$OUT"/ab-bench-*.txt; do echo "== $(basename "$f")"; grep -E "^\| tally" "$f"; done
for f in "$OUT"/ab-opbench-*.txt; do echo "== $(basename "$f")"; grep -iE "dense|shared" "$f" | head -6; done
