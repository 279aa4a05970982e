#!/usr/bin/env bash
# 2026-12-06, stop 41, call 4: as call 3 (stop41b.sh), with the swapped / wgmma tiles' Q6_K
# copies shared too (lanes t and t + 2 read the same ql and qh windows and d: lanes 0 and 1 copy
# them; gemm.cu swap_issue). Carry .carry/lab and .carry/s41c.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --wg --only q6_k (every type's wgmma-tile checks, then the Q6_K prefill shapes) and
#      lab --gated --only q6_k (the gated tiles' bit-equality checks, every type);
#   2. tally check --backend cuda, mid q4_k_m (its downs are Q6_K and Q4_K) at 1,000 and 64
#      tokens; logits digests base == new on mid q4_k_m and the 4-layer 35B shapes;
#   3. 35B-A3B Q4_K_M: pp512, pp2048, pp8192, base / new alternated twice.
# Prediction (written before): the Q6_K downs (x64 at 16 rows per expert, about half the 40
# layers) ~25% faster at 512 tokens; engine against 8719937: pp512 +9-11% (call 3: +6.7%),
# pp2048 +4%, pp8192 +2.5%; digests the same.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s41c.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s41c
B=.carry/bin/tally-base
N=.carry/bin/tally
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
F=$D/q4km.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
L=.carry/lab/gemm_bench
timeout 200 $L --wg --only q6_k > "$OUT/lab-wg.txt" 2>&1
row "lab --wg --only q6_k" "rc=$? $(grep -E 'cases, ' "$OUT/lab-wg.txt" | tr '\n' ' ') ($(el))"
timeout 200 $L --gated --only q6_k > "$OUT/lab-gated.txt" 2>&1
row "lab --gated --only q6_k" "rc=$? $(grep -E 'failing gated' "$OUT/lab-gated.txt") ($(el))"
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
sed -n '/== SUMMARY/,$p' "$OUT/lab-wg.txt" | grep -i "q6_k" | cut -c1-160
printf '%s\n' "${summary[@]}"
