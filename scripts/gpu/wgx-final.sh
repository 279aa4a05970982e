#!/usr/bin/env bash
# Issue 14, third round: the MoE tiles as chosen from the lab (w32 for the Q4_K/Q5_K/MXFP4 gate/up
# of short prompts, x64 / x96 for the Q6_K down, x128 for the Q4_K down of long prompts) and the
# kept f16 weights of the cuBLAS path. Checks: `tally check --backend cuda` on mid q4_k_m at
# 1,000 tokens (w128, x96, x128, kept copies), 300 (38 rows per expert: w32, x96, kept copies)
# and 64 tokens (w32, x64), each + 3 decode steps. Then the 35B-A3B Q4_K_M synth file: pp512,
# pp2048, pp8192 for A = TALLY_WGX=off TALLY_F16_KEEP=off and B = defaults, ABAB; tg128 once each
# (decode does not take these paths: a guard); pp32768 with the defaults in Markdown (tally's
# device peak). CHECK_TOKENS overrides the check lengths ("1000 300 64"); SHORT=1 leaves out the
# tg128 and pp32768 rows. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally
# kernels --arch sm_90a. Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job f
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
for tok in ${CHECK_TOKENS:-1000 300 64}; do
    timeout 150 "$T" check --model $MID --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-$tok.log" 2>&1
    row "check mid q4_k_m tokens=$tok" "rc=$? ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in A B; do
        e=(); [ $v = A ] && e=(TALLY_WGX=off TALLY_F16_KEEP=off)
        env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
[ "${SHORT:-0}" = 1 ] && { printf '%s\n' "${summary[@]}"; exit 0; }
for v in A B; do
    e=(); [ $v = A ] && e=(TALLY_WGX=off TALLY_F16_KEEP=off)
    env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 -o json > "$OUT/tg-$v.json" 2> "$OUT/tg-$v.err"
    row "tg128 $v" "rc=$? $(bench_row "$OUT/tg-$v.json") ($(el))"
done
timeout 150 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 3 > "$OUT/pp32768-B.md" 2>&1
row "pp32768 B" "rc=$? $(grep -E 'pp32768|peak' "$OUT/pp32768-B.md" | tr -s ' ' | tr '\n' ' ' | cut -c1-200) ($(el))"
pack
printf '%s\n' "${summary[@]}"
