#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop36/call1).
# 2026-12-05, stop 36, call 1. (1) stop35c.sh's check of the final cuBLAS paths (the review mend
# of stop 35, never run on a GPU). (2) Where the gated MoE tile's K step goes (issue 14: the
# 8,192-token gate/up runs at ~216 TFLOP/s, ~30% tensor busy): lab/gemm's --gated timings of
# gemm_q4_k_g128 / _g32 built with TALLY_WG_ABL = 0 (as committed), 1 (no x copies in the K loop),
# 2 (no weight copies), 3 (neither), 4 (no decode), 8 (no barrier), 16 (no MMAs); timing only, the
# results of 1-16 are wrong by design. Then ncu's sections of one 8,192-token g128 launch.
# Prediction (written before): the x copies (32 KB a step against 9 KB of weights) and the barrier
# are the big parts: abl1 -30%, abl8 -20%, abl4 -15%, abl16 -10% at 8,192 tokens.
# (3) The defaults on this GPU: pp512, pp8192, pp32768, tg128 (tally alone).
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer;
# TALLY_CACHE=.carry/kcache .carry/bin/tally-nopeer kernels --arch sm_90a; the lab binaries
# (nvcc ... -DTALLY_WG_ABL=N lab/gemm/bench.cu -o .carry/lab/gemm_bench_ablN);
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache lab. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 60 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (defaults)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for v in A A2 R; do
    e=(TALLY_UNUSED=1)
    [ $v = R ] && e=(TALLY_CAST_REUSE=off TALLY_F32_GEMM=simt)
    env "${e[@]}" timeout 30 "$T" run --model $MID --backend cuda --tokens 300 -n 6 -o json \
        > "$OUT/run-mid300-$v.json" 2> "$OUT/run-mid300-$v.err"
done
row "digests mid 300, defaults twice" "$(logits_same "$OUT" mid300 A A2) ($(el))"
row "digests mid 300, defaults vs reuse off + simt" "$(logits_same "$OUT" mid300 A R) ($(el))"
pack
for n in 0 1 2 3 4 8 16; do
    timeout 120 .carry/lab/gemm_bench_abl$n --gated --only-time --only q4_k > "$OUT/lab-abl$n.txt" 2>&1
    row "abl$n" "rc=$? $(grep 'time gated' "$OUT/lab-abl$n.txt" | awk '{print $4 "/" $5 ":" $(NF-3)}' | tr '\n' ' ') ($(el))"
done
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 150 ncu --clock-control none -k regex:gemm_q4_k_g128 --launch-skip 46 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    .carry/lab/gemm_bench_abl0 --gated --only-time --only q4_k > "$OUT/ncu-g128-8192.txt" 2>&1
row "ncu g128 8192" "rc=$? $(grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput' "$OUT/ncu-g128-8192.txt" | head -3 | tr -s ' ' | tr '\n' ';') ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
timeout 150 "$T" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/pp.json" 2> "$OUT/pp.err"
row "pp defaults" "rc=$? $(bench_row "$OUT/pp.json") ($(el))"
timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg.json" 2> "$OUT/tg.err"
row "tg128 defaults" "rc=$? $(bench_row "$OUT/tg.json") ($(el))"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
pack
printf '%s\n' "${summary[@]}"
