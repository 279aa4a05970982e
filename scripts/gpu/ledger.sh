#!/usr/bin/env bash
# GPU call 2 of 2 (right after prepare.sh, on the same warm machine): tally and llama.cpp on the
# same 35B file and GPU, one process, interleaved and noise-gated: llama-bench-style throughput
# (pp512, pp2048, pp8192, tg128) and the ledger at pp512 (graph, standalone, replay, byte/FLOP
# math against the measured peaks). Results land in $OUT; commit them under docs/results/.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
BIG=${BIG:-/tmp/q4km.gguf}
"$TALLY" machine --backend cuda -o json > "$OUT/machine.json"
timeout 240 "$TALLY" bench --model "$BIG" --backend cuda --peer llama.cpp -p 512,2048,8192 -n 128 -r 5 \
  --out-dir "$OUT" > "$OUT/bench.md" 2>&1; echo "bench rc=$?"; cat "$OUT/bench.md"
timeout 300 "$TALLY" ledger --model "$BIG" --backend cuda --peer llama.cpp -p 512 -r 5 \
  --out-dir "$OUT" > "$OUT/ledger.txt" 2>&1; echo "ledger rc=$?"
head -40 "$OUT/ledger.txt"
