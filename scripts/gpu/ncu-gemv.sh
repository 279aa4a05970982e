#!/usr/bin/env bash
# ncu of the dense decode GEMV (gemv4_<t>, 8192 x 2048, M = 1: the first launch of each kernel in
# `gemm_bench --decode --only-time`) for q4_k, iq4_xs and mxfp4: what holds IQ4_XS and MXFP4
# below Q4_K's GB/s (issue 10 item 5). Carry .carry/lab; BIN_<t> picks the build per type (the
# committed kernels of 535429a: IQ4_XS as in gemm_bench_base of scripts/gpu/gemv-win16.sh).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/ncu-gemv
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for t in q4_k iq4_xs mxfp4; do
  b=gemm_bench; [ $t = iq4_xs ] && b=${BIN_iq4_xs:-gemm_bench_base}
  timeout 100 ncu --kernel-name "gemv4_$t" --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats .carry/lab/$b --decode --only-time > "$OUT/ncu-gemv4-$t.txt" 2>&1
  echo "ncu $t rc=$?"
done
for t in q4_k iq4_xs mxfp4; do
  echo "== $t"; grep -E 'Duration|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Memory Throughput|Issued Warp|Eligible Warps|Achieved Occupancy|Stall|Warp Cycles Per Issued|Registers Per|Executed Instructions  ' "$OUT/ncu-gemv4-$t.txt" | head -16
done
tar -C /tmp -czf "$REAL_OUT/ncu-gemv.tgz" ncu-gemv
