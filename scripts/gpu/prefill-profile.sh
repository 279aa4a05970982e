#!/usr/bin/env bash
# Where prefill's device time goes now: ncu's time per kernel (kernels serialised) of one
# prefill of 512 and of 8,192 tokens of the 35B-A3B Q4_K_M synth file (pooled fill), and with
# LAB=1 first the wgmma lab (`gemm_bench --wg`, every .carry/lab/gemm_bench*). HERE first:
# scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a; for LAB=1 the lab
# build (scripts/gpu/wg-lab.sh says how). Carry .carry/bin, .carry/kcache (and .carry/lab).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job pp
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
if [ "${LAB:-0}" = 1 ]; then
    for B in .carry/lab/gemm_bench*; do
        timeout 300 "$B" --wg ${LAB_ARGS:-} > "$OUT/$(basename "$B").txt" 2>&1
        row "lab $(basename "$B")" "rc=$? $(grep -E 'cases, ' "$OUT/$(basename "$B").txt") ($(el))"
    done
    pack
fi
wait $SYNTH
row synth "$(el)"
for n in 512 8192; do ncu_prefill $F $n; pack; done
printf '%s\n' "${summary[@]}"
