#!/usr/bin/env bash
# 2026-12-06, stop 45, call 1. Carry .carry/s45a.tar.xz: bin/tally (this tree, no llama.cpp peer),
# kcache, lab/attn_bench (lab/attention/bench.cu built here with CUDA 13.0's nvcc, sm_90a).
#   1. the lab: flash_attn_wg_d256 (wgmma, attention_wg.cuh) checked against the float64
#      reference beside every other variant, then timed beside flash_attn_h_w4_d256 (the
#      engine's kernel) at pp512 .. pp32768 and a second 8,192-token chunk after 24,576;
#   2. the engine with TALLY_ATTN=wg: `tally check` (node by node against the CPU) on the
#      35B-A3B shapes with 4 layers at 100 and 700 tokens, and the converter-made fixtures
#      (scripts/gpu/converter.sh) at 1, 7, 37 and 100 tokens;
#   3. prefill A/B on the 35B-A3B Q4_K_M file: TALLY_ATTN=f16 (default) / wg / wg-serial (the
#      wgmma kernel without its softmax / P V overlap), alternated twice, pp512, pp8192, pp32768.
# Prediction (written before): (1) every check passes; wg at pp8192 ~450-500 TFLOP/s against
# ~285 for h_w4 (1.9 -> ~1.15 ms), pp32768 likewise, wg-serial ~20% below wg; pp512 about even
# (few blocks). (3) H100: pp8192 +4-5% (38.3k -> ~40k), pp32768 +12-15% (30.5k -> ~34.5k),
# pp512 +-1%.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s45a s45a
timeout 200 .carry/lab/attn_bench --quick > "$OUT/attn_bench.txt" 2>&1
row "lab attn_bench --quick" "rc=$? $(tail -1 "$OUT/attn_bench.txt") ($(el))"
grep -E "^(pp|shape|c8|tg)" "$OUT/attn_bench.txt" | grep -v "^timed" | head -40 > "$OUT/attn_table.txt"
pack
mid_l4_files
for t in 100 700; do
    TALLY_ATTN=wg timeout 150 "$N" check --model "$L4" --backend cuda --tokens $t -n 3 > "$OUT/check_l4_wg_$t.log" 2>&1
    row "check l4 wg $t" "rc=$? $(tail -1 "$OUT/check_l4_wg_$t.log") ($(el))"
done
TALLY_ATTN=wg CONV_TOKENS=1,7,37,100 timeout 200 scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1
row "converter fixtures wg" "rc=$? ($(el))"
pack
synth_35b q4_k_m
for v in f16 wg wg-serial f16 wg wg-serial; do
    [ "$(( $(date +%s) - t0 ))" -lt 500 ] || continue
    TALLY_ATTN=$v timeout 110 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp $v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
cat "$OUT/attn_table.txt"
tail -12 "$OUT/converter.txt"
