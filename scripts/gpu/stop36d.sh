#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop36/call4).
# 2026-12-05, stop 36, call 4: the warp-specialised gated tile gemm_<t>_gs128 in its final form
# (one A stage, four x stages, copies three steps ahead: call 3's gd128, now the only form) as
# the engine's default for the w128 gate/up of 32-byte-slot types (TALLY_WS=off restores g128).
# (1) lab/gemm --gated: gs128 bit for bit against the unfused launches (Q4_K, IQ4_XS, MXFP4,
# the legacy 4-bit types; the 35B shape at 512 and 8,192 tokens), times beside g128. (2) The
# engine: `tally check` on mid q4_k_m at 1,000 tokens (gs128 runs); logits digests off == on
# (mid 300, the 4-layer 35B shape at 4,000); pp512/8192/32768 off/on alternated twice.
# Prediction (written before): lab Q4_K gate/up at 8,192 tokens 1.24 -> 1.06 ms (call 3); the
# gated launches are ~20% of pp8192's device time: pp8192 +3%, pp32768 +3-4%, pp512 unchanged
# (g32 there).
# HERE first: cargo build --release; copy to .carry/bin/tally-nopeer; TALLY_CACHE=.carry/kcache
# .carry/bin/tally-nopeer kernels --arch sm_90a; nvcc ... lab/gemm/bench.cu -o
# .carry/lab/gemm_bench_wsabl0; tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache
# lab/gemm_bench_wsabl0. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36d
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
timeout 200 .carry/lab/gemm_bench_wsabl0 --gated > "$OUT/lab-gated.txt" 2>&1
row "lab --gated (gs128 checks + times)" "rc=$? $(tail -1 "$OUT/lab-gated.txt") ($(el))"
grep -E "FAIL|gs128" "$OUT/lab-gated.txt" | grep -E "FAIL|time" | head -20
pack
mid_l4_files
timeout 60 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000-ws.log" 2>&1
row "check mid 1000 (default: ws on)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000-ws.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for spec in "$MID 300" "$L4 4000"; do
    set -- $spec
    n=$(basename "$1" .gguf)-$2
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 60 "$T" run --model "$1" --backend cuda --tokens "$2" -n 6 -o json \
            > "$OUT/run-$n-$v.json" 2> "$OUT/run-$n-$v.err"
    done
    row "digests $n ws off == on" "$(logits_same "$OUT" "$n" A W) ($(el))"
done
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
pack
printf '%s\n' "${summary[@]}"
