#!/usr/bin/env bash
# GPU call 2 of 2 (right after prepare.sh, on the same warm machine; issue 13 item 1): the ledger
# of one decode step, tally against llama.cpp on the 35B file, at depth 512 and 8192
# (`tally ledger --step-at D`: graph export at position D, standalone timing, replay with its
# validations, bytes and GB/s per category; each run re-prefills the D-token context first, so
# the d8192 ledger spends most of its time in untimed prefills). Everything under /tmp/ol comes
# back as $OUT/ledger-decode.tgz; commit it under docs/results/.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
REAL_OUT=$OUT
export OUT=/tmp/ol; mkdir -p $OUT
BIG=${BIG:-/tmp/q4km.gguf}
t0=$(date +%s)
"$TALLY" machine --backend cuda -o json > "$OUT/machine.json"
for d in 512 8192; do
  left=$(( 560 - ($(date +%s) - t0) )); [ "$left" -lt 60 ] && break
  timeout "$left" "$TALLY" ledger --model "$BIG" --backend cuda --peer llama.cpp --step-at $d -r 5 \
    --busy-limit 64 --out-dir "$OUT/d$d" > "$OUT/ledger-d$d.txt" 2>&1; echo "ledger d$d rc=$?"
  head -30 "$OUT/ledger-d$d.txt"
done
tar czf "$REAL_OUT/ledger-decode.tgz" -C /tmp ol
