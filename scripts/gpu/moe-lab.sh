#!/usr/bin/env bash
# The routed-expert GEMM shapes in the lab, two builds side by side (issue 10 item 5, issue 14):
# `gemm_bench --moe` of the base build and of the working tree (every type of the downloaded
# mixes, pp512 and pp8192 routing), then ncu's stall, occupancy and memory sections of the m32
# gate/up kernel (pp512 routing) of each type named in NCU_TYPES (NCU_TILE: another tile, e.g.
# s16). BINS: the lab builds to time (default gemm_bench_base gemm_bench).
#   HERE first: build both binaries into .carry/lab (gemm_bench_base, gemm_bench: see
#   lab/gemm/README.md, add -lineinfo)          GPU host: scripts/gpu/moe-lab.sh (carry .carry/lab)
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/moe-lab
L=.carry/lab
BINS=${BINS:-gemm_bench_base gemm_bench}
for b in $BINS; do
  [ -x "$L/$b" ] || continue
  "$L/$b" --moe > "$OUT/$b.txt" 2>&1
  echo "$b rc=$?"
done
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for t in ${NCU_TYPES:-q4_k q8_0 mxfp4}; do
  for b in ${NCU_BINS:-gemm_bench}; do
    ncu --kernel-name "gemm_${t}_${NCU_TILE:-m32}" --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section InstructionStats \
      "$L/$b" --moe --only "$t" > "$OUT/ncu-$b-$t-${NCU_TILE:-m32}.txt" 2>&1
    echo "ncu $b $t rc=$?"
  done
done
for b in $BINS; do
  [ -f "$OUT/$b.txt" ] && { echo "== $b"; sed -n '/== SUMMARY/,$p' "$OUT/$b.txt"; }
done
tar -C /tmp -czf "$REAL_OUT/moe-lab.tgz" moe-lab
