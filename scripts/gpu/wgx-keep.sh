#!/usr/bin/env bash
# Issue 14, second round: the Q6_K down on the 96-row x-resident tile (gemm_<t>_x96) and the
# cuBLAS path's dense weights decoded to f16 once (TALLY_F16_KEEP; before: at every call). First
# the lab (`gemm_bench --wg --only q4_k`: the 32-row x-resident tile x32g for the gate/up of short
# prompts against the engine's tiles). Checks: `tally check --backend cuda` on mid q4_k_m at
# 1,000 tokens (x128, x96, kept f16 copies) and 64 tokens (x96), tiny-odd bf16 at 200 tokens
# (the q/gate split layout through a kept copy). Then the 35B-A3B Q4_K_M synth file: pp512,
# pp2048, pp8192 for A = TALLY_WGX=off TALLY_F16_KEEP=off, C = TALLY_F16_KEEP=off, B = defaults,
# twice in that order; pp32768 once with the defaults. HERE first: scripts/gpu/pack.sh;
# TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a; the lab build (scripts/gpu/wg-lab.sh).
# Carry .carry/bin, .carry/kcache, .carry/lab.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job k
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
timeout 200 .carry/lab/gemm_bench --wg --only q4_k > "$OUT/lab-q4_k.txt" 2>&1
row "lab --wg --only q4_k" "rc=$? $(grep -E 'cases, ' "$OUT/lab-q4_k.txt") ($(el))"
mid_l4_files
for tok in 1000 64; do
    timeout 150 "$T" check --model $MID --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-$tok.log" 2>&1
    row "check mid q4_k_m tokens=$tok" "rc=$? ($(el))"
done
"$T" synth --preset tiny-odd --quant bf16 --seed 2 --out /tmp/tiny-odd.gguf > /dev/null 2>&1
timeout 150 "$T" check --model /tmp/tiny-odd.gguf --backend cuda --tokens 200 -n 2 > "$OUT/check-tiny-odd-200.log" 2>&1
row "check tiny-odd bf16 tokens=200" "rc=$? ($(el))"
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in A C B; do
        case $v in
            A) e=(TALLY_WGX=off TALLY_F16_KEEP=off) ;;
            C) e=(TALLY_F16_KEEP=off) ;;
            B) e=() ;;
        esac
        env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
timeout 150 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json > "$OUT/pp32768-B.json" 2> "$OUT/pp32768-B.err"
row "pp32768 B" "rc=$? $(bench_row "$OUT/pp32768-B.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
sed -n '/== SUMMARY/,$p' "$OUT/lab-q4_k.txt" | cut -c1-220
