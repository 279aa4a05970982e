#!/usr/bin/env bash
# GPU call 1 of 2 for the side-by-side runs (the machine keeps its files while warm: make call 2
# within 30 s of this one returning). Builds llama.cpp's CUDA libraries from the carried sources
# and writes the 35B-A3B Q4_K_M synth file, concurrently (~7 minutes on 16 cores; FILL=pool
# writes the file from pooled blocks, `tally synth --fill pool`: seconds instead of minutes).
# Carry: .carry/bin and .carry/llama.tar.xz (scripts/gpu/pack.sh --llama, then
# `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
# The sources travel packed (.carry/llama.tar.xz: a carried folder of many files is slow).
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
BIG=${BIG:-/tmp/q4km.gguf}
FILL=${FILL:-exact}
t0=$(date +%s)
# The peer-linked binary cannot start before llama.cpp's libraries exist: synth with the other.
SYNTH="$TALLY_NOPEER"
[ -f "$BIG" ] || ( "$SYNTH" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill "$FILL" --out "$BIG" -o json > "$OUT/synth_35b.json" 2>&1 ) &
[ -f target/llama-cuda/bin/libllama.so ] || ( JOBS=12 scripts/gpu/llama-build.sh > "$OUT/llama_build.log" 2>&1 ) &
wait
ls -la "$BIG" target/llama-cuda/bin/libllama.so target/llama-cuda/bin/libggml-cuda.so
echo "prepare: $(( $(date +%s) - t0 )) s"
