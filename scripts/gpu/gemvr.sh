#!/usr/bin/env bash
# Issue 13: the persistent multi-row GEMV (gemvr_<t> for the output head at one token, gemvr4_<t>
# for every dense GEMV of a verification batch of 2-4 rows). Lab: the head's time at 1-4 x rows,
# gemv4_<t> (grid.y = rows) against gemvr. Checks: logits digests (prefill + 6 decode steps) on
# mid q4_k_m and the 4-layer 35B-shaped file, TALLY_GEMVR=on == off (bit for bit: gemvr's sums
# are gemv4's); `tally check --backend cuda` on mid at 64 tokens. Then the 35B-A3B Q4_K_M synth
# file with its MTP block: tg128 on/off ABAB, speculative k = 3 at replayed acceptance 0.8
# on/off. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch
# sm_90a; nvcc lab/gemm/bench.cu -> .carry/lab/gemm_bench. Carry .carry/bin, .carry/kcache,
# .carry/lab. Everything lands in $OUT/g.tgz (one file comes back).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job g
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
timeout 150 .carry/lab/gemm_bench --decode --head > "$OUT/lab-head.txt" 2>&1
row "lab head" "rc=$? ($(el))"
grep -E "^output head" "$OUT/lab-head.txt" >> "$OUT/summary.txt"
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 64 -n 3 > "$OUT/check-mid-64.log" 2>&1
row "check mid q4_k_m tokens=64" "rc=$? ($(el))"
for f in $MID $L4; do
    run_json on $f
    TALLY_GEMVR=off run_json off $f
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename $f .gguf)" on off) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for v in off on off on; do
    TALLY_GEMVR=$v timeout 150 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$(date +%s).json" 2> "$OUT/tg-$v.err"
    row "tg128 gemvr=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/tg-$v-*.json | head -1)") ($(el))"
done
pack
for v in off on; do
    TALLY_GEMVR=$v timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
        --replay-acceptance 0.8 -o md > "$OUT/spec-$v.md" 2> "$OUT/spec-$v.err"
    row "spec k3 a0.8 gemvr=$v" "rc=$? $(grep -E 'tg128|spec' "$OUT/spec-$v.md" | tr -s ' ' | cut -c1-160 | tr '\n' ' ') ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
