#!/usr/bin/env bash
# 2026-12-06, stop 41, call 3: the Q4_K block header copied once per lane group in the swapped /
# wgmma tiles (gemm.cu swap_issue / swap_decode). Carry .carry/lab (the lab built here),
# .carry/s41b.tar.xz (tar cJf of .carry/bin and .carry/kcache: tally = this tree, tally-base =
# 8719937, both without the peer; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a for both).
#   1. lab --gated --only q4_k (bit-equality of the gated tiles with the unfused launches, then
#      g32 / g128 / gs128 timings and g32's ablations) and lab --wg --only q4_k;
#   2. tally check --backend cuda, mid q4_k_m at 1,000 and 64 tokens (every Q4_K tile);
#      logits digests base == new on mid q4_k_m and the 4-layer 35B shapes (the same bits);
#   3. 35B-A3B Q4_K_M: pp512, pp2048, pp8192, base / new alternated twice.
# Prediction (written before): g32 at 512 tokens 0.284 -> ~0.24 ms (the copies move 18 KB a
# block step instead of 24); engine pp512 +4-6%, pp2048 +3%, pp8192 +1-2% (there the
# warp-specialised gs128 is bound by its decoders, not its copies); digests the same.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s41b.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s41b
B=.carry/bin/tally-base
N=.carry/bin/tally
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
F=$D/q4km.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
L=.carry/lab/gemm_bench
timeout 200 $L --gated --only q4_k > "$OUT/lab-gated.txt" 2>&1
row "lab --gated --only q4_k" "rc=$? $(grep -E 'failing gated' "$OUT/lab-gated.txt") ($(el))"
timeout 200 $L --wg --only q4_k > "$OUT/lab-wg.txt" 2>&1
row "lab --wg --only q4_k" "rc=$? $(grep -E 'cases, ' "$OUT/lab-wg.txt" | tr '\n' ' ') ($(el))"
pack
TALLY_NOPEER=$N mid_l4_files
for tok in 1000 64; do
    timeout 150 "$N" check --model $MID --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-$tok.log" 2>&1
    row "check mid q4_k_m tokens=$tok" "rc=$? $(grep -i 'worst' "$OUT/check-mid-$tok.log" | head -1 | cut -c1-80) ($(el))"
done
for f in $MID $L4; do
    run_json base $f $B
    run_json new $f $N
    row "digests $(basename $f) base vs new" "$(logits_same "$OUT" "$(basename $f .gguf)" base new) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in base new; do
        bin=$N; [ $v = base ] && bin=$B
        timeout 120 "$bin" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
        pack
    done
done
rm -f $F
grep -E "time gated q4_k  g(32|128)|gs128" "$OUT/lab-gated.txt" | grep -v ablation | cut -c1-175
printf '%s\n' "${summary[@]}"
