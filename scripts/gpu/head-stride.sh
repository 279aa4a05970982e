#!/usr/bin/env bash
# The dense GEMV's capped grid (TALLY_GEMV_MAX_BLOCKS: at most N blocks per multiprocessor, each
# walking column groups and prefetching the next one's rows into L2; only the output head has
# more groups), against the full grid: one short call, tally alone, one binary (the option
# changes no kernel, so NVRTC compiles once).
#   1. the 35B Q4_K_M pool file, meanwhile logits digests of a prefill and 6 decode steps on the
#      4-layer 35B-shaped file, capped == full (every column's sum is the same bits in any block);
#   2. the 35B file: pp512 and tg128, full, capped at 8, full, capped at 8 (same call).
# The summary goes to $OUT/summary.txt line by line and the tarball is rewritten after each step,
# so a call cut short still returns what it measured (the 2026-12-04 attempt ran out of device
# time before its single tar). About 220 s with the machine's start. Carry .carry/bin.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/head-stride
t0=$(date +%s)
S="$OUT/summary.txt"
: > "$S"
row() { printf '%-40s %s (%s s)\n' "$1" "$2" "$(( $(date +%s) - t0 ))" | tee -a "$S"; tar -C /tmp -czf "$REAL_OUT/head-stride.tgz" head-stride; }
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
L4=/tmp/l4.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > /dev/null 2>&1 &
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out $L4 > /dev/null 2>&1
for cap in "" 8; do
  TALLY_GEMV_MAX_BLOCKS=$cap timeout 150 "$T" run --model $L4 --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-l4-cap$cap.json" 2> "$OUT/run-l4-cap$cap.err"
done
row "logits bits capped == full, l4" "$(logits_same "$OUT" l4 cap cap8)"
wait
for cap in "" 8 "" 8; do
  TALLY_GEMV_MAX_BLOCKS=$cap timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg.json" 2>> "$OUT/tg.err"
  cat "$OUT/tg.json" >> "$OUT/tg-cap$cap.jsonl"
  row "35B tally alone, cap ${cap:-none}" "$(bench_row "$OUT/tg.json")"
done
cat "$S"
