#!/usr/bin/env bash
# One call on a fresh GPU machine: the cuBLAS path (the default since 2026-12-04), checked and
# measured against the engine's own kernels (TALLY_GEMM=kernels).
#   TALLY_GEMM=cublas      dense projections through cuBLAS (docs/cuda.md)
# (Decode graphs are the default now: scripts/gpu/reshape.sh checks and measures them.)
# Steps:
#   1. `tally check` (every node against the CPU) with the cuBLAS path on for every projection of
#      at least 16 rows: tiny, tiny-odd (bf16, the q/gate split), mid;
#   2. the 35B-A3B Q4_K_M synth file; `tally bench` pp512/2048/8192 + tg128 for "default" and
#      "new" (cuBLAS on), alternated default new default new (the options are read when the
#      backend opens, so each is its own process);
#   3. `tally opbench` pp512 on both GEMM paths.
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
  for mode in default new; do
    if [ $mode = new ]; then export TALLY_GEMM=cublas; else export TALLY_GEMM=kernels; fi
    timeout 150 "$TALLY_NOPEER" bench --model "$BIG" --backend cuda -p 512,2048,8192 -n 128 -r 5 \
      --out-dir "/tmp/ab-$mode-$round" > "$OUT/ab-bench-$mode-$round.txt" 2>&1
    echo "bench $mode round $round rc=$?"
  done
done
for mode in own cublas; do
  if [ $mode = cublas ]; then export TALLY_GEMM=cublas; else export TALLY_GEMM=kernels; fi
  timeout 120 "$TALLY_NOPEER" opbench --model "$BIG" --backend cuda -p 512 --out-dir "/tmp/ab-op-$mode" \
    > "$OUT/ab-opbench-$mode.txt" 2>&1
  echo "opbench $mode rc=$?"
done
echo "ab: $(( $(date +%s) - t0 )) s"
for f in "$OUT"/ab-bench-*.txt; do echo "== $(basename "$f")"; grep -E "^\| tally|peak" "$f"; done
for f in "$OUT"/ab-opbench-*.txt; do echo "== $(basename "$f")"; grep -iE "dense|shared" "$f" | head -6; done
