#!/usr/bin/env bash
# The quantisation types on the GPU, one call (issue 10 item 3):
#   1. the GEMM lab (lab/gemm/bench.cu): pieces / dequant8 bit-exact against the host reference
#      for every type, dequant_rows, and the GEMM/GEMV correctness matrix, now including Q4_0,
#      Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K (`SUMMARY` lists any FAIL);
#   2. `tally check --backend cuda` (every node against the CPU backend) on tiny and mid synth
#      files of every new mix: q5_k_m q6_k iq4_xs iq4_nl mxfp4_moe q4_0 q3_k_m q2_k.
# Pass: the lab exits 0 and every `check` line says rc=0 with its verdict `pass`.
# Carry: .carry/bin (scripts/gpu/pack.sh). Writes $OUT/quants-*.txt; prints a table last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
summary=()
row() { summary+=("$(printf '%-30s %s' "$1" "$2")"); }

nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
  lab/gemm/bench.cu -o /tmp/lab_gemm > "$OUT/quants-lab-build.txt" 2>&1 || { tail -30 "$OUT/quants-lab-build.txt"; row "lab gemm" "BUILD FAILED"; }
if [ -x /tmp/lab_gemm ]; then
  timeout 300 /tmp/lab_gemm --no-time > "$OUT/quants-lab.txt" 2>&1; rc=$?
  grep -E "FAIL|pieces|SUMMARY" "$OUT/quants-lab.txt" | tail -40
  row "lab gemm (checks)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
fi

seed=11
for mix in q5_k_m q6_k iq4_xs iq4_nl mxfp4_moe q4_0 q3_k_m q2_k; do
  for preset in tiny mid; do
    f="/tmp/quants-$preset-$mix.gguf"
    "$TALLY_NOPEER" synth --preset "$preset" --quant "$mix" --seed $seed --out "$f" > /dev/null 2>&1
    timeout 150 "$TALLY_NOPEER" check --model "$f" --backend cuda --tokens 1,37,100 -n 2 \
      > "$OUT/quants-check-$preset-$mix.txt" 2>&1; rc=$?
    tail -4 "$OUT/quants-check-$preset-$mix.txt"
    row "check $preset $mix" "rc=$rc $(grep -oiE 'pass|fail' "$OUT/quants-check-$preset-$mix.txt" | tail -1)"
    seed=$((seed + 1))
  done
done
echo "== summary"
printf '%s\n' "${summary[@]}"
