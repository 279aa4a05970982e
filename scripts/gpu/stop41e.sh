#!/usr/bin/env bash
# 2026-12-06, stop 41, call 7: (a) the lane-group sharing of the swapped / wgmma tiles' copies
# extended to Q5_K (header and qh vectors; quant.cuh Piece<QT_Q5_K>::issue_async_shared);
# (b) the codebook GEMVs' table words back to immediates (stop 40's global-table hoist removed:
# no measured gain). Carry .carry/lab and .carry/s41e.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --decode (every GEMV / MMV case against float64, then the decode shapes' GB/s),
#      lab --wg --only q5_k, lab --gated --only q5_k;
#   2. tally check mid q4_k_m at 1,000 tokens; digests base == new (mid q4_k_m, 4-layer 35B);
#   3. 35B-A3B Q5_K_M: pp512, pp8192, base / new alternated twice; then MXFP4_MOE tg128, base /
#      new alternated twice (the GEMV change), while time is left.
# Prediction (written before): Q5_K g32 at 512 tokens 15-20% faster than its stop 40 figure;
# q5_k_m pp512 +8-10% over 8719937 (Q5_K gate/up and Q6_K downs both share now), pp8192 +3%;
# MXFP4_MOE tg128 within 1.5% of base (stop 40: the hoist changed nothing); digests the same.
# (As run, the tg rows asked for -p 0, which the bench refuses; fixed here to -p 512 after the
# call, and those rows ran by hand on the warm machine: call8/command.txt.)
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s41e.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s41e
B=.carry/bin/tally-base
N=.carry/bin/tally
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
"$N" synth --preset 35b-a3b --quant q5_k_m --seed 1 --fill pool --out $D/q5km.gguf > "$OUT/synth-q5.log" 2>&1 &
SYNTH=$!
L=.carry/lab/gemm_bench
timeout 200 $L --decode > "$OUT/lab-decode.txt" 2>&1
row "lab --decode" "rc=$? $(grep -E 'cases, ' "$OUT/lab-decode.txt" | tr '\n' ' ') ($(el))"
timeout 150 $L --wg --only q5_k > "$OUT/lab-wg.txt" 2>&1
row "lab --wg --only q5_k" "rc=$? $(grep -E 'cases, ' "$OUT/lab-wg.txt" | tr '\n' ' ') ($(el))"
timeout 150 $L --gated --only q5_k > "$OUT/lab-gated.txt" 2>&1
row "lab --gated --only q5_k" "rc=$? $(grep -E 'failing gated' "$OUT/lab-gated.txt") ($(el))"
pack
TALLY_NOPEER=$N mid_l4_files
timeout 150 "$N" check --model $MID --backend cuda --tokens 1000 -n 3 > "$OUT/check-mid-1000.log" 2>&1
row "check mid q4_k_m tokens=1000" "rc=$? ($(el))"
for f in $MID $L4; do
    run_json base $f $B
    run_json new $f $N
    row "digests $(basename $f) base vs new" "$(logits_same "$OUT" "$(basename $f .gguf)" base new) ($(el))"
done
pack
wait $SYNTH
row "synth q5_k_m" "$(el)"
"$N" synth --preset 35b-a3b --quant mxfp4_moe --seed 1 --fill pool --out $D/mxfp4.gguf > "$OUT/synth-mx.log" 2>&1
row "synth mxfp4_moe" "$(el)"
for round in 1 2; do
    for v in base new; do
        bin=$N; [ $v = base ] && bin=$B
        timeout 100 "$bin" bench -m $D/q5km.gguf --backend cuda -p 512,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "q5_k_m pp $v $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
        pack
    done
done
for round in 1 2; do
    for v in base new; do
        [ "$(( $(date +%s) - t0 ))" -lt 480 ] || continue
        bin=$N; [ $v = base ] && bin=$B
        timeout 60 "$bin" bench -m $D/mxfp4.gguf --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "mxfp4_moe tg $v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
        pack
    done
done
rm -f $D/q5km.gguf $D/mxfp4.gguf
grep -E "time gated q5_k" "$OUT/lab-gated.txt" | cut -c1-175
printf '%s\n' "${summary[@]}"
