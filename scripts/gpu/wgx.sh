#!/usr/bin/env bash
# Issue 14: the x-resident wgmma tile for the MoE down projections (gemm_<t>_x128 for the Q4_K
# down of long prompts, gemm_<t>_x64 for the Q6_K down of short ones; TALLY_WGX=off: the tiles
# of before) and the pipelined w128 (in both arms). Checks: `tally check --backend cuda` on mid
# q4_k_m at 1,000 tokens (x128 and the pipelined w128) and 64 tokens (x64), each with 3 decode
# steps. Then the 35B-A3B Q4_K_M synth file: pp512, pp2048, pp8192 with TALLY_WGX=off / on,
# alternated twice. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels
# --arch sm_90a. Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job x
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
for tok in 1000 64; do
    timeout 150 "$T" check --model $MID --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-$tok.log" 2>&1
    row "check mid q4_k_m tokens=$tok" "rc=$? ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for v in off on off on; do
    TALLY_WGX=$v timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp wgx=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
