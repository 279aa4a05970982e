#!/usr/bin/env bash
# 2026-12-06, stop 41, call 1 (carry .carry/lab: the lab binary built here, see lab/gemm/README.md):
# where the gated MoE gate/up tile of short prompts (gemm_q4_k_g32, issue 14: at pp512 the MoE
# GEMMs are ~63% of the device time and stream their weights at ~1 TB/s) loses its time.
#   1. lab --gated --only q4_k: checks, then g32 at 512 tokens with every ablation of its K loop
#      (gemm_wg_body's ABL: 1 no x copies, 2 no weight copies, 4 no decode, 16 no MMAs) and at
#      K = 8192 (4x longer blocks, the same pipeline ramp per block);
#   2. ncu --set full of one g32 launch at 512 tokens;
#   3. ncu --set full of the first launch of gemv_q4_k / gemv_iq4_xs / gemv_mxfp4 (the dense 8192 x
#      2048 decode shape; issue 10's per-byte clause).
# Prediction (written before): the copies-only ablation (20) takes >= 80% of the full tile's time
# (the tile is bound by how its copies move, not by decode or MMAs); without x copies (1) it is
# >= 25% faster (x is re-read from L2 by each of an expert's 8 column blocks: ~270 MB of L2
# reads a launch beside 302 MB of weights); K = 8192 reaches no more than 1.2x the GB/s of K = 2048.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job s41
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
L=.carry/lab/gemm_bench
timeout 300 $L --gated --only q4_k > "$OUT/lab-gated.txt" 2>&1
row "lab --gated --only q4_k" "rc=$? $(grep -E 'failing gated' "$OUT/lab-gated.txt") ($(el))"
pack
timeout 150 ncu --set full -k regex:'^gemm_q4_k_g32$' -c 1 --kill on $L --gated --only q4_k --only-time > "$OUT/ncu-g32-512.txt" 2>&1
row "ncu g32 T=512" "rc=$? ($(el))"
pack
for t in q4_k iq4_xs mxfp4; do
    timeout 100 ncu --set full -k regex:"^gemv_$t\$" -c 1 --kill on $L --decode --only-time > "$OUT/ncu-gemv-$t.txt" 2>&1
    row "ncu gemv_$t" "rc=$? $(grep -E '^ +(Duration|Memory Throughput|DRAM Throughput)' "$OUT/ncu-gemv-$t.txt" | awk '{print $NF}' | tr '\n' ' ') ($(el))"
    pack
done
grep -E "time gated" "$OUT/lab-gated.txt" | cut -c1-170
grep -E '^ +(Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\) Throughput|Achieved Occupancy)' "$OUT/ncu-g32-512.txt"
printf '%s\n' "${summary[@]}"
