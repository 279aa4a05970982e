#!/usr/bin/env bash
# NOT RUN 2026-12-05: the H200 it asked for was refused (it cost 2 minutes of device time); kept for the next H200 call.
# 2026-12-05, stop 37, call 7: the defaults at 308b97f (the delta prep's batched loads and the
# wgmma scan) on an H200 if one comes (issue 14's targets are H200 numbers: pp512 >= 16k,
# pp8192 >= 45k, pp32768 >= 35k; the last H200 run of the defaults was stop 32's). tally only
# (llama.cpp's build costs half a call; stop 32 measured it on the H200: pp512 5.6k, pp8192
# 5.5k, tg128 237). (1) tally check mid 1000 tokens; (2) pp512/2048/8192/32768, -r 3;
# (3) tg128; (4) the device's own numbers of the peak tally allocated (bench's JSON).
# Prediction (written before): on an H200 the H100's ratios carry over: pp8192 ~37-38k
# (stop 32: 33.6k on the H200 with stop-32 code), pp512 ~14k, pp32768 ~31k, tg128 ~327.
# HERE first: .carry/bin/tally-nopeer = 308b97f's build; its kernels in .carry/kcache;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37g
T=$TALLY_NOPEER
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 90 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
timeout 200 "$T" bench -m $F --backend cuda -p 512,2048,8192,32768 -n 0 -r 3 -o json > "$OUT/pp.json" 2> "$OUT/pp.err"
row "pp defaults" "rc=$? $(bench_row "$OUT/pp.json") ($(el))"
pack
timeout 90 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg.json" 2> "$OUT/tg.err"
row "tg128 defaults" "rc=$? $(bench_row "$OUT/tg.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
