#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop36/call7).
# 2026-12-05, stop 36, call 7: the Q4_K gate/up from 51 to 100 rows per expert on w128 (whose
# gated launch is the warp-specialised gs128) instead of w32 (`wg_tile`, with TALLY_WS on and
# TALLY_GATED on). Lab, this stop (H100, 35B gate/up): 2,048 tokens, 64 rows per expert, gs128
# 0.474 ms against 0.583 for g32. (1) `tally check` on mid q4_k_m at 512 tokens (64 experts,
# top 8: 64 rows per expert, so gs128 runs there now) and logits digests TALLY_WS=off (w32)
# against on (w128) at 512 tokens (a different tile: equal bits expected, the same k16 order and
# products, but not promised). (2) pp512/1024/2048/4096 off/on alternated twice.
# Prediction (written before): pp2048 +4% (the gated launches 40 x 0.11 ms less of ~83 ms),
# pp512, pp1024 (16 and 32 rows) and pp4096 (128 rows: w128 already) unchanged.
# HERE first: cargo build --release; copy to .carry/bin/tally-nopeer; TALLY_CACHE=.carry/kcache
# .carry/bin/tally-nopeer kernels --arch sm_90a; tar cJf .carry/new.tar.xz -C .carry
# bin/tally-nopeer kcache. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36f
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 60 "$T" check --model $MID --backend cuda --tokens 512 -n 2 > "$OUT/check-mid-512.log" 2>&1
row "check mid 512 (ws: w128/gs128)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-512.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for v in A W; do
    e=(TALLY_WS=off)
    [ $v = W ] && e=(TALLY_WS=on)
    env "${e[@]}" timeout 60 "$T" run --model $MID --backend cuda --tokens 512 -n 6 -o json \
        > "$OUT/run-mid512-$v.json" 2> "$OUT/run-mid512-$v.err"
done
row "digests mid 512 ws off (w32) == on (w128)" "$(logits_same "$OUT" mid512 A W) ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 512,1024,2048,4096 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
printf '%s\n' "${summary[@]}"
