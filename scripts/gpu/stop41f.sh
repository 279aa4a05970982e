#!/usr/bin/env bash
# 2026-12-06, stop 41, call 9: IQ4_XS's 8-byte super-block header copied once per lane group in
# the swapped / wgmma tiles (quant_small.cuh Piece<QT_IQ4_XS>::issue_async_shared; 96 -> 72 bytes
# a row and K step). Carry .carry/lab and .carry/s41f.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --wg --only iq4_xs and lab --gated --only iq4_xs (checks, then IQ4_XS timings);
#   2. mid-preset IQ4_XS file: tally check --backend cuda at 1,000 and 64 tokens; logits digests
#      base == new;
#   3. 35B-A3B IQ4_XS: pp512, pp8192, base / new alternated twice.
# Prediction (written before): iq4_xs g32 at 512 tokens 8-12% faster than stop 40's; engine
# pp512 +3-5%, pp8192 +1-2% against 8719937; digests the same.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s41f.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s41f
B=.carry/bin/tally-base
N=.carry/bin/tally
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
"$N" synth --preset 35b-a3b --quant iq4_xs --seed 1 --fill pool --out $D/iq4xs.gguf > "$OUT/synth.log" 2>&1 &
SYNTH=$!
L=.carry/lab/gemm_bench
timeout 150 $L --wg --only iq4_xs > "$OUT/lab-wg.txt" 2>&1
row "lab --wg --only iq4_xs" "rc=$? $(grep -E 'cases, ' "$OUT/lab-wg.txt" | tr '\n' ' ') ($(el))"
timeout 150 $L --gated --only iq4_xs > "$OUT/lab-gated.txt" 2>&1
row "lab --gated --only iq4_xs" "rc=$? $(grep -E 'failing gated' "$OUT/lab-gated.txt") ($(el))"
pack
MID=/tmp/mid-iq4_xs.gguf
"$N" synth --preset mid --quant iq4_xs --seed 4 --out $MID > /dev/null 2>&1
for tok in 1000 64; do
    timeout 150 "$N" check --model $MID --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-iq4_xs-$tok.log" 2>&1
    row "check mid iq4_xs tokens=$tok" "rc=$? ($(el))"
done
run_json base $MID $B
run_json new $MID $N
row "digests mid-iq4_xs base vs new" "$(logits_same "$OUT" mid-iq4_xs base new) ($(el))"
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in base new; do
        bin=$N; [ $v = base ] && bin=$B
        timeout 100 "$bin" bench -m $D/iq4xs.gguf --backend cuda -p 512,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "iq4_xs pp $v $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
        pack
    done
done
rm -f $D/iq4xs.gguf
grep -E "time gated iq4_xs" "$OUT/lab-gated.txt" | cut -c1-175
printf '%s\n' "${summary[@]}"
