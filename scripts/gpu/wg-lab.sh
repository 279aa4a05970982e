#!/usr/bin/env bash
# The wgmma tiles (gemm_<t>_w32/_w64/_w128, kernels/gemm_wg.cuh) in lab/gemm: correctness of every
# type x variant, then the 35B model's prefill shapes (MoE gate/up and down at 512 and 8192
# tokens, the dense projections at M = 512 and 8192) against the tiles the engine runs today.
# HERE first (no device time on a compile error), one binary per build variant:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
#        [-DNAME=VALUE] lab/gemm/bench.cu -L/opt/cu13/nvidia/cu13/lib -o .carry/lab/gemm_bench[_TAG]
# Carry .carry/lab. Runs every .carry/lab/gemm_bench* with the arguments given (e.g. --only q4_k)
# and prints each one's summary table.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/wg
for B in .carry/lab/gemm_bench*; do
    tag=$(basename "$B")
    timeout 300 "$B" --wg "$@" > "$OUT/$tag.txt" 2>&1
    echo "rc=$?" >> "$OUT/$tag.txt"
    tar -C /tmp -czf "$REAL_OUT/wg.tgz" wg
done
for f in "$OUT"/gemm_bench*.txt; do
    echo "== $(basename "$f")"
    grep -E "cases, |rc=" "$f"
    sed -n '/== SUMMARY/,$p' "$f" | cut -c1-150
done
