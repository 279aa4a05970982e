#!/usr/bin/env bash
# Nsight Compute on the wgmma tile (gemm_q4_k_w128) in lab/gemm: one launch of the MoE gate/up
# shape at 8192 tokens and one of the dense qkv shape at M = 8192 (`--wg --only q4_k
# --only-time`: the w128 launches of those shapes are numbers 48 and 216 of the run), full
# section set, clock control none. Carry .carry/lab (gemm_bench built as wg-lab.sh says).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/wgncu
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
B=.carry/lab/gemm_bench
for spec in "moe:48" "dense:216"; do
    name=${spec%%:*}; skip=${spec##*:}
    timeout 200 ncu --clock-control none --set full -k regex:gemm_q4_k_w128 --launch-skip "$skip" --launch-count 1 \
        -o "$OUT/$name" "$B" --wg --only q4_k --only-time > "$OUT/$name.log" 2>&1
    echo "$name rc=$?"
    ncu --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name-details.txt" 2>&1
    ncu --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name-sass.csv" 2>/dev/null
    gzip -f "$OUT/$name-sass.csv"
    tar -C /tmp -czf "$REAL_OUT/wgncu.tgz" wgncu
done
for name in moe dense; do
    echo "== $name"
    grep -E "Grid Size|Duration|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Registers Per|Achieved Occupancy|Theoretical Occupancy|Stall" "$OUT/$name-details.txt" | head -40
done
