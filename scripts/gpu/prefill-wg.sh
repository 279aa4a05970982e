#!/usr/bin/env bash
# Issue 14, first step after the ledger of prefill-before.sh: the wgmma tile on the MoE
# projections of long prompts (gemm_<t>_w128 where use_wg says) and cuBLAS as the default for
# the dense projections. Checks: `tally check --backend cuda` (node by node against the CPU,
# every activation poisoned) on mid q4_k_m at 1,000 tokens (64 experts top-8: 125 pairs per
# expert, so the MoE gate/up and the Q6_K downs run on the wgmma tile) and at 64 tokens (the
# old tiles); then the 35B-A3B Q4_K_M synth file: tally bench pp512/pp8192/pp32768 with the
# defaults and with TALLY_GEMM=kernels, each with tally's device peak; ncu per-kernel table of
# one pp8192 prefill. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels
# --arch sm_90a. Carry .carry/bin and .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job pw
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
"$T" synth --preset mid --quant q4_k_m --seed 4 --out /tmp/mid.gguf > /dev/null 2>&1
for n in 1000 64; do
    timeout 150 "$T" check --model /tmp/mid.gguf --backend cuda --tokens $n -n 2 > "$OUT/check-mid-$n.log" 2>&1
    row "check mid q4_k_m tokens=$n" "rc=$? $(grep -E '^\| ' "$OUT/check-mid-$n.log" | tail -n +3 | cut -d'|' -f2,3,5,10 | tr '\n' ' ') ($(el))"
done
wait $SYNTH
row synth "$(el)"
for v in default kernels; do
    env $( [ $v = kernels ] && echo TALLY_GEMM=kernels ) timeout 200 "$T" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o md \
        > "$OUT/bench-$v.md" 2> "$OUT/bench-$v.err"
    row "bench $v" "rc=$? $(grep -E 'pp(512|8192|32768) ' "$OUT/bench-$v.md" | awk -F'|' '{printf "%s=%s ", $8, $9}') ($(el))"
    grep -E 'peak' "$OUT/bench-$v.md" >> "$OUT/summary.txt"
    pack
done
ncu_prefill $F 8192 "$T"
pack
printf '%s\n' "${summary[@]}"
head -30 "$OUT/kernels-pp8192.txt"
