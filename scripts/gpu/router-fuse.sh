#!/usr/bin/env bash
# Issue 13 (reverted: see docs/results/2026-12-04-h200-router-fuse): the router's f32 GEMV and its top-k in one launch at decode (gemv_topk_f32; the
# last block to finish runs router_topk8's body). Checks: logits digests of a 37-token prefill
# and 6 decode steps on mid q4_k_m and the 4-layer 35B-shaped file: default ==
# TALLY_NO_FUSE=router == TALLY_NO_FUSE=1 (every fused launch bit-identical to its nodes). Then
# the 35B-A3B Q4_K_M synth file: tg128, TALLY_NO_FUSE=router / default, ABAB. HERE first:
# scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a. Carry .carry/bin,
# .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job r
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
for f in $MID $L4; do
    n=$(basename $f .gguf)
    run_json fused $f
    TALLY_NO_FUSE=router run_json norouter $f
    TALLY_NO_FUSE=1 run_json nofuse $f
    row "digests $n" "$(logits_same "$OUT" "$n" fused norouter nofuse) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for v in router on router on; do
    e=(); [ $v = router ] && e=(TALLY_NO_FUSE=router)
    env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 -o json > "$OUT/tg-$v-$(date +%s).json" 2> "$OUT/tg-$v.err"
    row "tg128 no_fuse=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/tg-$v-*.json | head -1)") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
