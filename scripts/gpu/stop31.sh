#!/usr/bin/env bash
# Issues 13 and 14, written 2026-12-04 (stop 31) without a GPU, checked on the CPU emulators
# (lab/attention/emu, lab/gemm/emu simt.sh) only; run after gated.sh, then make the opt-ins the
# default where the checks pass and the times say so:
#  - TALLY_ATTN=f16: prompts of 64 tokens and more attend through f16 copies of the K/V cache
#    (attn_kv_to_f16 + flash_attn_h_w4_d*, now in the engine's attention.cu; the lab measured
#    2.12 against 3.19 ms at pp8192, conversion included, 2026-12-04-h200-decode-attn);
#    prediction: pp8192 +3.5% (29 ms of attention -> ~19.5), pp2048 +1%, pp512 +0.5%;
#  - TALLY_F32_GEMM=tf32: the routers as 3xTF32 on the tensor cores on the f32 GEMMs' tiles
#    (gemm_f32_tf32, gemm_f32_tf32_m32); prediction: the router 293 -> ~90 us a layer at pp8192
#    (11.4 ms -> ~3.5: +3%), pp512 +1-2%, error ~1e-6 (the lab's bound 2e-6; emulated 1.5e-7);
#  - TALLY_ATTN_SPLIT=on: a prompt's attention that fills less than 4 blocks an SM (a
#    verification of k drafts: one block per KV head walked every key) splits the keys and
#    combines; prediction: speculative k=3 at depth 8192 +15-30% (~2 ms of the verification's
#    attention at d8192 -> ~0.2), no change at tg128 (depth ~128).
# Checks: the attention lab (every variant, the engine's f16 kernel through AttnArgs.k16/v16);
# the gemm lab's --router (the four f32 GEMMs against float64, then their times at 512, 2048,
# 8192 tokens); `tally check --backend cuda` with all three on: mid q4_k_m (1,000 tokens: the f16
# path and the sliced tf32 router; 1/37/100: splits) and mid with 256 experts (2,200 tokens: the
# 64 x 64 tf32 router); the speculative bench's own equality with plain greedy at depth 8192.
# Then the 35B-A3B Q4_K_M synth file: pp512, pp2048, pp8192 default (A), TALLY_ATTN=f16 (B),
# B + TALLY_F32_GEMM=tf32 (C), ABCABC; speculative k=3, replayed acceptance 0.8, after an
# 8192-token prompt, split off/on.
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a (the
# default cache: no switch here changes the compiled sources); the labs: nvcc -O3 -std=c++17
# -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels lab/attention/bench.cu
# -o .carry/lab/attn_bench, and lab/gemm/bench.cu -o .carry/lab/gemm_bench (lab/gemm/README.md).
# Carry .carry/bin, .carry/kcache, .carry/lab.
# Ran 2026-12-05 (docs/results/2026-12-05-h200-stop32/); TALLY_ATTN=f16 and TALLY_ATTN_SPLIT=on
# are the defaults since (A now = B; TALLY_ATTN=f32 / TALLY_ATTN_SPLIT=off select the old forms).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job stop31
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
if [ -x .carry/lab/attn_bench ]; then
    timeout 180 .carry/lab/attn_bench > "$OUT/lab-attn.txt" 2>&1
    row "lab attention" "rc=$? $(tail -1 "$OUT/lab-attn.txt") ($(el))"
fi
if [ -x .carry/lab/gemm_bench ]; then
    timeout 120 .carry/lab/gemm_bench --router > "$OUT/lab-router.txt" 2>&1
    row "lab --router" "rc=$? $(tail -1 "$OUT/lab-router.txt") ($(el))"
fi
mid_l4_files
# mid with the real 256 experts: its router takes the 64 x 64 tile (so gemm_f32_tf32) from 2,112
# tokens; 64 experts would need 8,449.
M256=/tmp/mid-e256.gguf
"$T" synth --preset mid --quant q4_k_m --seed 5 --set n_experts=256 --out $M256 > /dev/null 2>&1
ALL=(TALLY_ATTN=f16 TALLY_ATTN_SPLIT=on TALLY_F32_GEMM=tf32)
for spec in "$MID 1000" "$MID 1,37,100" "$M256 2200"; do
    set -- $spec
    env "${ALL[@]}" timeout 240 "$T" check --model $1 --backend cuda --tokens $2 -n 2 \
        > "$OUT/check-$(basename $1 .gguf)-$2.log" 2>&1
    row "check $(basename $1 .gguf) all three tokens=$2" "rc=$? $(grep -iE 'worst|pass|fail' "$OUT/check-$(basename $1 .gguf)-$2.log" | tail -1) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
# A llama.cpp build left running in the background (stop32.sh) would fail the noise gate.
while pgrep -f llama-build.sh > /dev/null; do sleep 3; done
row "background builds done" "$(el)"
for round in 1 2; do
    for v in A B C; do
        case $v in
            A) e=() ;;
            B) e=(TALLY_ATTN=f16) ;;
            C) e=(TALLY_ATTN=f16 TALLY_F32_GEMM=tf32) ;;
        esac
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
