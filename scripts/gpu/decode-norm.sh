#!/usr/bin/env bash
# Issue 13: add_rms_norm's register form (rows of at most 4 values a thread: every input loaded
# before any output is written; bit for bit the loop form). Checks: logits digests on mid q4_k_m
# and the 4-layer 35B-shaped file, default == TALLY_NORM=block (the loop form and norm_rows);
# `tally check --backend cuda` on mid q4_k_m at 64 tokens. Then the 35B-A3B Q4_K_M synth file:
# tg128 ABAB (block, default), and an ncu per-kernel table of one pp8192 prefill (issue 14).
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin, .carry/kcache. Everything in $OUT/n.tgz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job n
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 64 -n 3 > "$OUT/check-mid-64.log" 2>&1
row "check mid q4_k_m tokens=64" "rc=$? ($(el))"
for f in $MID $L4; do
    run_json warp $f
    TALLY_NORM=block run_json block $f
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename $f .gguf)" warp block) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for v in block warp block warp; do
    TALLY_NORM=$v timeout 150 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$(date +%s).json" 2> "$OUT/tg-$v.err"
    row "tg128 norm=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/tg-$v-*.json | head -1)") ($(el))"
done
pack
ncu_prefill $F 8192 "$T"
pack
printf '%s\n' "${summary[@]}"
head -40 "$OUT/kernels-pp8192.txt"
