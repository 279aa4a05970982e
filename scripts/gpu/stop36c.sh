#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop36/call3); gd128 below is the form that
# became gs128 (the engine's default for Q4_K and MXFP4); rerunning this needs that tree.
# 2026-12-05, stop 36, call 3 (lab only): why the warp-specialised gs128 (call 2: bit for bit,
# 1.19x g128 at 512 and 2,048 tokens, 0.99x at 8,192) does not gain on full tiles. (1) The
# deeper-pipelined lab form gd128 (one A stage, four x stages, copies three steps ahead instead of
# two) bit for bit against the unfused launches (every type whose stages fit, the 35B shape at
# 8,192), then timed beside g128 and gs128. (2) The same timings with TALLY_WG_ABL = 3 (no copies
# in either tile's K loop) and 16 (no MMAs). (3) ncu's stall reasons of one gs128 and one gd128
# launch at 8,192 tokens.
# Prediction (written before): if the copies' latency is the limit (two steps of lead against
# ~1-2 us of loaded L2/DRAM latency), gd128 at 8,192 tokens 1.24 -> ~1.0 ms and the no-copy
# ablation of gs128 near 0.75; if not, gd128 = gs128 and the stalls name the barrier.
# HERE first: nvcc ... -DTALLY_WG_ABL=N lab/gemm/bench.cu -o .carry/lab/gemm_bench_wsablN (0, 3,
# 16); tar cJf .carry/new.tar.xz -C .carry lab. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36c
timeout 200 .carry/lab/gemm_bench_wsabl0 --gated --only q4_k > "$OUT/lab-gated-abl0.txt" 2>&1
row "abl0 --gated --only q4_k" "rc=$? $(tail -1 "$OUT/lab-gated-abl0.txt") ($(el))"
grep -E "FAIL" "$OUT/lab-gated-abl0.txt" | head -5
grep -E "time gated q4_k +g[sd]128" "$OUT/lab-gated-abl0.txt"
pack
for n in 3 16; do
    timeout 120 .carry/lab/gemm_bench_wsabl$n --gated --only-time --only q4_k > "$OUT/lab-abl$n.txt" 2>&1
    row "abl$n" "rc=$? ($(el))"
    grep -E "time gated q4_k +g[sd]128" "$OUT/lab-abl$n.txt"
done
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for k in gs128 gd128; do
    timeout 100 ncu --clock-control none -k regex:gemm_q4_k_$k --launch-skip 46 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
        .carry/lab/gemm_bench_wsabl0 --gated --only-time --only q4_k > "$OUT/ncu-$k-8192.txt" 2>&1
    row "ncu $k 8192" "rc=$? $(grep -E 'Duration' "$OUT/ncu-$k-8192.txt" | head -1 | tr -s ' ') ($(el))"
    grep -E "stalled_.*ratio" "$OUT/ncu-$k-8192.txt" | awk '$NF+0 > 0.3 {print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//' | head -12
done
pack
printf '%s\n' "${summary[@]}"
