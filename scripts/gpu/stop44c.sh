#!/usr/bin/env bash
# 2026-12-06, stop 44, side by side with llama.cpp (issues 13, 14): tally (this tree, the
# dynamic-link peer: scripts/gpu/pack.sh --llama) and llama.cpp's CUDA libraries built HERE
# (scripts/gpu/llama-build-local.sh) travel in .carry/s44sbs.tar.xz with the kernel cache.
#   1. the 35B-A3B Q4_K_M synth file; `tally bench --peer llama.cpp` pp512, pp8192, pp32768,
#      tg128 at depth 0 and 8,192 (device peak in bench.json);
#   2. tally alone: speculative k = 3, replayed drafts at acceptance 0.8.
# Prediction (written before): on an H100 as call 1 with this stop's norms: pp512 ~15.2k,
# pp8192 ~38k, pp32768 ~30.5k, tg128 ~312; llama.cpp ~5.3k, ~5.2k, ~225: ratios ~2.9x, ~7x, ~1.4x.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s44sbs.tar.xz -C .carry
export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:${LD_LIBRARY_PATH:-}"
. scripts/gpu/env.sh
ab_start s44sbs none
synth_35b q4_k_m
pack
timeout 420 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -d 0,8192 -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs" "rc=$? ($(el))"
pack
timeout 120 "$N" bench -m "$F" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o json > "$OUT/spec.json" 2> "$OUT/spec.err"
row "spec k=3 a=0.8" "rc=$? $(bench_row "$OUT/spec.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/sbs.md"
