#!/usr/bin/env bash
# Issues 13 and 14, written 2026-12-04 (stop 31) without a GPU, checked on the CPU emulator
# (lab/attention/emu) only; run after gated.sh, then make the opt-ins the default where the
# checks pass and the times say so:
#  - TALLY_ATTN=f16: prompts of 64 tokens and more attend through f16 copies of the K/V cache
#    (attn_kv_to_f16 + flash_attn_h_w4_d*, now in the engine's attention.cu; the lab measured
#    2.12 against 3.19 ms at pp8192, conversion included, 2026-12-04-h200-decode-attn);
#    prediction: pp8192 +3.5% (29 ms of attention -> ~19.5), pp2048 +1%, pp512 +0.5%;
#  - TALLY_ATTN_SPLIT=on: a prompt's attention that fills less than 4 blocks an SM (a
#    verification of k drafts: one block per KV head walked every key) splits the keys and
#    combines; prediction: speculative k=3 at depth 8192 +15-30% (~2 ms of the verification's
#    attention at d8192 -> ~0.2), no change at tg128 (depth ~128).
# Checks: the attention lab (every variant, the engine's f16 kernel through AttnArgs.k16/v16);
# `tally check --backend cuda` on mid q4_k_m (1,000 tokens: the f16 path; 1/37/100: splits)
# with both on; the speculative bench's own equality with plain greedy at depth 8192.
# Then the 35B-A3B Q4_K_M synth file: pp512, pp2048, pp8192 default (A) and TALLY_ATTN=f16
# (B), ABAB; speculative k=3, replayed acceptance 0.8, after an 8192-token prompt, split off/on.
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a (the
# default cache: neither switch changes the compiled sources); the lab: nvcc -O3 -std=c++17
# -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels lab/attention/bench.cu
# -o .carry/lab/attn_bench. Carry .carry/bin, .carry/kcache, .carry/lab.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job attn
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
if [ -x .carry/lab/attn_bench ]; then
    timeout 180 .carry/lab/attn_bench > "$OUT/lab-attn.txt" 2>&1
    row "lab attention" "rc=$? $(tail -1 "$OUT/lab-attn.txt") ($(el))"
fi
mid_l4_files
for toks in 1000 1,37,100; do
    TALLY_ATTN=f16 TALLY_ATTN_SPLIT=on timeout 150 "$T" check --model $MID --backend cuda --tokens $toks -n 2 \
        > "$OUT/check-mid-$toks.log" 2>&1
    row "check mid f16+split tokens=$toks" "rc=$? $(grep -iE 'worst|pass|fail' "$OUT/check-mid-$toks.log" | tail -1) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in A B; do
        e=(); [ $v = B ] && e=(TALLY_ATTN=f16)
        env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in off on; do
    TALLY_ATTN_SPLIT=$v timeout 200 "$T" bench -m $F --backend cuda -p 1 -n 128 -d 8192 -r 3 --spec mtp \
        --draft-max 3 --replay-acceptance 0.8 -o md > "$OUT/spec-d8192-$v.md" 2> "$OUT/spec-d8192-$v.err"
    row "spec k=3 a=0.8 d8192 split=$v" "rc=$? $(grep -oE 'spec k=[0-9][^|]*\| +[0-9.]+ ± [0-9.]+' "$OUT/spec-d8192-$v.md" | tr -s ' ' | head -2 | tr '\n' ' ') $(grep -iE 'diverged|error' "$OUT/spec-d8192-$v.err" | head -2 | tr '\n' ' ') ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
