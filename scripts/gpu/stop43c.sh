#!/usr/bin/env bash
# 2026-12-06, stop 43, call 3 (.carry/s43a.tar.xz): is the gated g32's 292 us a launch under ncu
# (stop 42, engine pp512) against the lab's 0.225 ms (uniform) / 0.247 ms (model routing, call 1)
# a measurement artefact? The same ncu settings (cache flushed before each kernel) on both: the
# engine's pp512 and the lab's gated g32 at 512 tokens on the recorded routing.
# Prediction (written before): under ncu the lab's g32 reads ~270-290 us (cold caches: x and the
# tile tables from DRAM, no overlap with a previous kernel), so most of the gap is the method.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s43c s43a
synth_35b q4_k_m
R=/tmp/s43/routing-512.txt
[ -f "$R" ] || { R=$OUT/routing-512.txt; "$N" run --model "$F" --backend cuda --tokens 512 --routing --routing-table "$R" > /dev/null 2>&1; }
row "routing table" "$R ($(el))"
ncu_prefill "$F" 512 "$N"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
LAB_ROUTING=$R timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --kernel-name gemm_q4_k_g32 \
    --launch-count 12 .carry/lab/gemm_bench --gated --only q4_k --only-time > "$OUT/ncu-lab-g32.csv" 2> "$OUT/ncu-lab-g32.err"
row "ncu lab g32" "rc=$? ($(el))"
pack
printf '%s\n' "${summary[@]}"
grep -E "gemm_q4_k_g32|gemm_q4_k_x32|gemm_q6_k_x32" "$OUT/kernels-pp512.txt" | head -6
grep gemm_q4_k_g32 "$OUT/ncu-lab-g32.csv" | awk -F'","' '{print $(NF-2), $NF}' | head -14
