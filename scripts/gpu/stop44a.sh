#!/usr/bin/env bash
# 2026-12-06, stop 44, call 1: where today's code stands on the device that came (tally alone;
# llama.cpp's CUDA libraries were not built yet). Carry .carry/s43a.tar.xz (bin/tally = 422e8f8's
# code, the kernels of stop 42; kcache).
#   1. the 35B-A3B Q4_K_M synth file; bench pp512, pp8192, pp32768, tg128 at depth 0 and 8,192;
#   2. speculative k = 3, replayed drafts at acceptance 0.8, depth 0.
# Prediction (written before): on an H200, pp512 ~16.5k (H100 15.7k, x1.05), pp8192 ~38k,
# pp32768 ~31k, tg128 ~330 (stop 32: 322-325 on an H200), tg128 @ d8192 ~310, spec ~420.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s44a s43a
synth_35b q4_k_m
pack
timeout 300 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 128 -d 0,8192 -r 3 -o json > "$OUT/bench.json" 2> "$OUT/bench.err"
row "bench" "rc=$? $(bench_row "$OUT/bench.json") ($(el))"
pack
timeout 150 "$N" bench -m "$F" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o json > "$OUT/spec.json" 2> "$OUT/spec.err"
row "spec k=3 a=0.8" "rc=$? $(bench_row "$OUT/spec.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
