#!/usr/bin/env bash
# RAN 2026-12-05 twice (results: docs/results/2026-12-05-h100-stop36/call5, call6; both on an H100).
# 2026-12-05, stop 36, call 5 (asked for an H200; the four calls before ran on an H100): the
# defaults of this commit (cast reuse, the f32 router on cuBLAS, the warp-specialised gated tile)
# on the 35B-A3B Q4_K_M synth file, tally alone (no llama.cpp build: it costs half a call):
# pp512/2048/8192/32768 -r 3 with TALLY_WS=off and on alternated twice, then tg128.
# Prediction (written before): on the H200 as on the H100, pp8192 +2%, pp32768 +1%, pp512 and
# pp2048 unchanged (g32 there); pp8192 ~35,500 (stop 32's 33,900 plus this stop's and stop 35's
# defaults), pp512 ~14,000.
# HERE first: cargo build --release; copy to .carry/bin/tally-nopeer; TALLY_CACHE=.carry/kcache
# .carry/bin/tally-nopeer kernels --arch sm_90a; tar cJf .carry/new.tar.xz -C .carry
# bin/tally-nopeer kcache. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop36e
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
for round in 1 2; do
    for v in A W; do
        e=(TALLY_WS=off)
        [ $v = W ] && e=(TALLY_WS=on)
        env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 512,2048,8192,32768 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg.json" 2> "$OUT/tg.err"
row "tg128 defaults" "rc=$? $(bench_row "$OUT/tg.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
