#!/usr/bin/env bash
# 2026-12-07, stop 48, call 2: the bulk-fed one-row GEMV (gemvt_<t>, TALLY_GEMVT=4 / 2) for the
# output head. Carry .carry/s48b.tar.xz: bin/tally (the working tree with gemvt, no peer),
# lab/gemm_bench (lab/gemm/bench.cu of the same tree), kcache (sm_90a); the tree of 104f13b.
#   1. lab: the head (Q6_K, 248,320 x 2,048) at one x row on gemv4 / gemvr / gemvt / gemvt2, each
#      checked against the CPU, and every decode GEMV shape on the same variants;
#   2. ncu of the three head kernels' first launches (memory, warp states, instructions);
#   3. logits digests of the 4-layer file (prefill 37 + 6 decode steps) with TALLY_GEMVT=off/4/2;
#   4. tg128 of the 35B-A3B Q4_K_M file, off / 4 / 2 alternated twice.
# Prediction (written before): gemvr 2.2-2.5 TB/s, with its load units busy (17 narrow loads a
# Q6_K piece); gemvt 3.6-4.0 TB/s on an H200 (2.8-3.0 on an H100): the head 166 -> ~110 us on
# an H200, tg128 +1.5-2% (~5 tok/s); same digests.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s48b s48b
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 150 .carry/lab/gemm_bench --decode --only-time > "$OUT/lab-decode.txt" 2>&1
row "lab decode shapes" "rc=$? ($(el))"
grep -E "output head" "$OUT/lab-decode.txt" | head -8 >> "$OUT/summary.txt"
pack
timeout 120 ncu --kernel-name regex:'gemv(r|t|t2)_q6_k' --launch-count 3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
    .carry/lab/gemm_bench --decode --head > "$OUT/ncu-head.txt" 2>&1
row "ncu head" "rc=$? ($(el))"
pack
mid_l4_files
for v in off 4 2; do TALLY_GEMVT=$v run_json "$v" "$L4"; done
row "digests l4 gemvt off/4/2" "$(logits_same "$OUT" l4 off 4 2) ($(el))"
pack
synth_35b q4_k_m
for round in 1 2; do
    for v in off 4 2; do
        [ "$(( $(date +%s) - t0 ))" -lt 500 ] || continue
        TALLY_GEMVT=$v timeout 100 "$N" bench -m "$F" --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg128 gemvt=$v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
        pack
    done
done
printf '%s\n' "${summary[@]}"
grep -E "time output head" "$OUT/lab-decode.txt" | head -8
grep -E "gemv(r|t|t2)_q6_k|Duration|DRAM Throughput|L1/TEX Cache Throughput|Issued Warp|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Executed Instructions  " "$OUT/ncu-head.txt" | head -40
