#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop36/call2); its two-A-stage gs128 was replaced
# by call 3's deeper form, which now carries the name gs128: rerunning this needs that tree.
# 2026-12-05, stop 36, call 2: the warp-specialised gated tile gemm_<t>_gs128 (gemm_wg.cuh
# gemm_ws_body; TALLY_WS=on), written after call 1's ablations (stop36.sh: no single part of the
# g128 K step is the limit; two warps a scheduler run load, decode and MMA issue in one stream).
# (1) lab/gemm --gated: gs128 bit for bit against two unfused w128 launches + SwiGlu (every type
# whose stages fit; the 35B shape at 512 and 8,192 tokens), then its time against g128.
# (2) The engine: `tally check` on mid q4_k_m at 1,000 tokens with TALLY_WS=on (125 rows per
# expert: the w128 tile, so gs128 runs); logits digests with it on and off (mid 300 tokens, the
# 4-layer 35B shape at 4,000: the same bits expected); pp512/2048/8192 off/on alternated twice.
# Prediction (written before): lab Q4_K gate/up at 8,192 tokens 1.21 -> 0.70-0.85 ms on the H100
# (the decoders' stream alone ~1,000-1,400 cycles a step against 2,830 now); pp8192 +6-10%,
# pp2048 +3-5%, pp512 unchanged (its tiles are g32).
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer;
# TALLY_CACHE=.carry/kcache .carry/bin/tally-nopeer kernels --arch sm_90a; nvcc ... lab/gemm/bench.cu
# -o .carry/lab/gemm_bench_ws; tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache
# lab/gemm_bench_ws. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36b
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
timeout 200 .carry/lab/gemm_bench_ws --gated > "$OUT/lab-gated.txt" 2>&1
row "lab --gated (gs128 checks + times)" "rc=$? $(tail -1 "$OUT/lab-gated.txt") ($(el))"
grep -E "FAIL|gs128" "$OUT/lab-gated.txt" | grep -E "FAIL|time" | head -20
pack
mid_l4_files
TALLY_WS=on timeout 60 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000-ws.log" 2>&1
row "check mid 1000 TALLY_WS=on" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000-ws.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for spec in "$MID 300" "$L4 4000"; do
    set -- $spec
    n=$(basename "$1" .gguf)-$2
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 60 "$T" run --model "$1" --backend cuda --tokens "$2" -n 6 -o json \
            > "$OUT/run-$n-$v.json" 2> "$OUT/run-$n-$v.err"
    done
    row "digests $n ws off == on" "$(logits_same "$OUT" "$n" A W) ($(el))"
done
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 90 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 100 ncu --clock-control none -k regex:gemm_q4_k_gs128 --launch-skip 46 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    .carry/lab/gemm_bench_ws --gated --only-time --only q4_k > "$OUT/ncu-gs128-8192.txt" 2>&1
row "ncu gs128 8192" "rc=$? $(grep -E 'Duration|Compute \(SM\) Throughput|Issue Slots Busy' "$OUT/ncu-gs128-8192.txt" | head -3 | tr -s ' ' | tr '\n' ';') ($(el))"
pack
printf '%s\n' "${summary[@]}"
