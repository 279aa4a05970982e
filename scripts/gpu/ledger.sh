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
t0=$(date +%s)
"$TALLY" machine --backend cuda -o json > "$OUT/machine.json"
timeout 240 "$TALLY" bench --model "$BIG" --backend cuda --peer llama.cpp -p 512,2048,8192 -n 128 -r 5 \
  --out-dir "$OUT" > "$OUT/bench.md" 2>&1; echo "bench rc=$?"; cat "$OUT/bench.md"
LB=target/llama-cuda/bin/llama-bench
if [ -x "$LB" ]; then
  # llama.cpp's own benchmark on the same file, beside the peer's numbers (default ubatch 512,
  # then -ub 2048 for the long prompt).
  timeout 60 "$LB" -m "$BIG" -ngl 99 -fa 1 -p 512,2048,8192 -n 128 -r 5 -o md > "$OUT/llama-bench.md" 2>"$OUT/llama-bench.err"
  echo "llama-bench rc=$?"
  timeout 30 "$LB" -m "$BIG" -ngl 99 -fa 1 -p 8192 -n 0 -ub 2048 -r 3 -o md >> "$OUT/llama-bench.md" 2>>"$OUT/llama-bench.err"
  echo "llama-bench ub2048 rc=$?"; cat "$OUT/llama-bench.md"
fi
# The ledger gets what is left of a 10-minute call.
left=$(( 585 - ($(date +%s) - t0) )); [ "$left" -lt 60 ] && left=60
timeout "$left" "$TALLY" ledger --model "$BIG" --backend cuda --peer llama.cpp -p 512 -r 5 \
  --out-dir "$OUT" > "$OUT/ledger.txt" 2>&1; echo "ledger rc=$?"
head -40 "$OUT/ledger.txt"
