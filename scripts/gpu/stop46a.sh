#!/usr/bin/env bash
# 2026-12-06, stop 46, call 1. Carry .carry/s46 (bin/tally: this tree without the llama.cpp
# peer; kcache: its kernels for sm_90a; lab/gemm_bench: lab/gemm/bench.cu built here with CUDA
# 13.0's nvcc).
#   1. the lab: `gemm_bench --gated --only q4_k`: every gated tile's bit-equality checks against
#      the unfused launches (gs256 on tiles of one half, two halves and a remainder, and the 35B
#      gate/up at 2,048 and 8,192 tokens), then the Q4_K gate/up at 512 .. 8,192 tokens: g32,
#      g128, gs128, gs256; then the MXFP4 timings alone;
#   2. the engine: logits digests of an 8,192-token prompt (256 rows per expert: gs256 runs) and
#      six decode steps with TALLY_WS256=on and off (the same bits expected), on the 35B shapes
#      with 4 layers;
#   3. prefill A/B on the 35B-A3B Q4_K_M file: TALLY_WS256=off / on alternated twice, pp512,
#      pp2048, pp8192, pp32768;
#   4. what is left: `tally check` (node by node against the CPU) of the 4-layer file at 4,200
#      tokens with gs256 (131 rows per expert).
# Prediction (written before): (1) every check passes; Q4_K gate/up at 8,192 tokens gs128 ~1.05
# ms -> gs256 ~0.65 ms, at 4,096 ~0.6 -> ~0.45, at 2,048 gs256 slower (tiles half empty);
# (3) pp8192 +6-8% (H100 ~39.2k -> ~42k), pp32768 +3-4%, pp512 and pp2048 unchanged (under 128
# rows per expert gs256 is not taken).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/s46/kcache ] && rm -rf .carry/kcache && cp -r .carry/s46/kcache .carry/kcache
ab_start s46a none
N=$PWD/.carry/s46/bin/tally
export TALLY=$N TALLY_NOPEER=$N
timeout 150 .carry/s46/lab/gemm_bench --gated --only q4_k > "$OUT/lab-gated-q4_k.txt" 2>&1
row "lab gated q4_k" "rc=$? $(tail -1 "$OUT/lab-gated-q4_k.txt") ($(el))"
timeout 60 .carry/s46/lab/gemm_bench --gated --only mxfp4 --only-time > "$OUT/lab-gated-mxfp4.txt" 2>&1
row "lab gated mxfp4 (times)" "rc=$? ($(el))"
grep -E "FAIL|gs256" "$OUT/lab-gated-q4_k.txt" | head -40 > "$OUT/lab-table.txt"
grep -E "gs256" "$OUT/lab-gated-mxfp4.txt" >> "$OUT/lab-table.txt"
pack
mid_l4_files
for v in off on; do
    TALLY_WS256=$v RUN_TOKENS=8192 run_json $v "$L4" "$N"
done
row "digests l4 8192 tokens ws256 off/on" "$(logits_same "$OUT" l4 off on) ($(el))"
pack
synth_35b q4_k_m
for v in off on off on; do
    [ "$(( $(date +%s) - t0 ))" -lt 430 ] || continue
    TALLY_WS256=$v timeout 110 "$N" bench -m "$F" --backend cuda -p 512,2048,8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp ws256=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
    pack
done
left=$(( 585 - $(date +%s) + t0 ))
if [ "$left" -gt 60 ]; then
    TALLY_WS256=on timeout "$left" "$N" check --model "$L4" --backend cuda --tokens 4200 -n 2 > "$OUT/check-l4-ws256-4200.log" 2>&1
    row "check l4 ws256 4200" "rc=$? $(tail -1 "$OUT/check-l4-ws256-4200.log") ($(el))"
fi
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/lab-table.txt"
