#!/usr/bin/env bash
# One call on a fresh GPU machine: prepare (llama.cpp's CUDA libraries and the 35B-A3B Q4_K_M
# synth file, concurrently), then `tally bench` of tally and llama.cpp side by side in one
# process (pp512, pp2048, pp8192, tg128; interleaved, noise-gated). Results land in $OUT.
# Carry: .carry/bin and .carry/llama.cpp (scripts/gpu/pack.sh --llama).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
BIG=${BIG:-/tmp/q4km.gguf}
t0=$(date +%s)
LLAMA_BENCH=0 scripts/gpu/prepare.sh
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
left=$(( ${DEADLINE_S:-590} - ($(date +%s) - t0) )); [ "$left" -lt 60 ] && left=60
timeout "$left" "$TALLY" bench --model "$BIG" --backend cuda --peer llama.cpp -p 512,2048,8192 -n 128 -r 5 \
  --out-dir "$OUT" > "$OUT/bench.md" 2>&1; echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
cat "$OUT/bench.md"
