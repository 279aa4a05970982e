#!/usr/bin/env bash
# Issue 14, written 2026-12-04 (stop 30) without a GPU, checked on the CPU emulator only; run this
# first, then make the opt-ins the default where the digests agree and the times say so:
#  - the gated gate/up tile: a prompt's routed gate, up and SwiGlu in one wgmma launch
#    (gemm_<t>_g32 / _g128, ops/fused.rs expert_gated; opt-in TALLY_GATED=on);
#  - add_rms_norm leaving unstored the intermediate outputs no later node reads (the combine's,
#    the gated shared expert's, the FFN sum's; opt-in TALLY_ADD_NORM=skip);
#  - the x-resident MoE tiles (gemm_<t>_x64/_x96/_x128: the downs) starting each weight block
#    with scale-d off instead of zeroing their accumulators in the loop, which made ptxas
#    serialise their wgmmas (C7511); the default now, TALLY_WGX_CLEAR=on compiles the old form.
# Checks: the lab's --gated mode (gated vs two unfused launches + SwiGlu, bit for bit, every type,
# on the hardware; then timings at 512/2048/8192 tokens); `tally check --backend cuda` on mid
# q4_k_m at 1,000 tokens (x96/x128 downs); logits digests (prefill + 6 decode steps) on mid
# q4_k_m (300, 1,000 tokens) and the 4-layer 35B-shaped file (300 tokens: w32 gate/up, x64 Q6_K
# down; 4,000: w128, x96, x128): default == old x-tile form == gated + skip == TALLY_NO_FUSE=1.
# Then the 35B-A3B Q4_K_M synth file: pp512, pp2048, pp8192 for A (TALLY_WGX_CLEAR=on: the
# committed kernels before), B (default), C (default + TALLY_GATED=on TALLY_ADD_NORM=skip),
# ABCABC; tg128 A and C.
# HERE first: scripts/gpu/pack.sh; both kernel caches: TALLY_CACHE=.carry/kcache tally kernels
# --arch sm_90a, and the same with TALLY_WGX_CLEAR=on; the lab: nvcc ... lab/gemm/bench.cu -o
# .carry/lab/gemm_bench (lab/gemm/README.md). Carry .carry/bin, .carry/kcache, .carry/lab.
# Ran 2026-12-05 (docs/results/2026-12-05-h200-stop32/, its timings lost to the noise gate); the
# gated tile and the skip are the defaults since, so "B (default)" now includes them and C = B.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job g
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
if [ -x .carry/lab/gemm_bench ]; then
    timeout 240 .carry/lab/gemm_bench --gated > "$OUT/lab-gated.txt" 2>&1
    row "lab --gated" "rc=$? $(tail -1 "$OUT/lab-gated.txt") ($(el))"
fi
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid q4_k_m tokens=1000" "rc=$? ($(el))"
for spec in "$MID 300" "$MID 1000" "$L4 300" "$L4 4000"; do
    set -- $spec
    n=$(basename $1 .gguf)
    for v in new clear gated nofuse; do
        case $v in
            new) e=() ;;
            clear) e=(TALLY_WGX_CLEAR=on) ;;
            gated) e=(TALLY_GATED=on TALLY_ADD_NORM=skip) ;;
            nofuse) e=(TALLY_NO_FUSE=1) ;;
        esac
        env "${e[@]}" timeout 150 "$T" run --model $1 --backend cuda --tokens $2 -n 6 -o json \
            > "$OUT/run-$n-$2-$v.json" 2> "$OUT/run-$n-$2-$v.err"
    done
    row "digests $n tokens=$2" "$(logits_same "$OUT" "$n-$2" new clear gated nofuse) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
vars() {
    case $1 in
        A) e=(TALLY_WGX_CLEAR=on) ;;
        B) e=() ;;
        C) e=(TALLY_GATED=on TALLY_ADD_NORM=skip) ;;
    esac
}
for round in 1 2; do
    for v in A B C; do
        vars $v
        env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in A C; do
    vars $v
    env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 -o json > "$OUT/tg-$v.json" 2> "$OUT/tg-$v.err"
    row "tg128 $v" "rc=$? $(bench_row "$OUT/tg-$v.json") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
