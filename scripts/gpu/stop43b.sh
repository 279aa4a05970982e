#!/usr/bin/env bash
# 2026-12-06, stop 43, call 2 (same binary as call 1, .carry/s43a.tar.xz): the pp512 ledger of
# tally against itself with `--routing realistic` (stop 42's default) beside call 1's `model`,
# on the same machine; then one decode step of the 4-layer file under ncu (for the next stop).
# Prediction (written before): under realistic routing the standalone MoE gate/up and down fall
# ~5-10% below their in-graph figures again (call 1, model routing: 2.5% and 1.9% below).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s43b s43a
synth_35b q4_k_m
timeout 200 "$N" ledger --model "$F" --backend cuda --peer self -p 512 -r 3 --routing realistic \
    --out-dir "$OUT/ledger-pp512-realistic" > "$OUT/ledger-pp512-realistic.log" 2>&1
row "ledger pp512 self, routing realistic" "rc=$? ($(el))"
pack
M=/tmp/l4.gguf timeout 120 scripts/gpu/ncu-step.sh > "$OUT/ncu-step.out" 2>&1
cp "$OUT/p/step-d0.txt" "$OUT/" 2> /dev/null
row "ncu decode step (4 layers)" "($(el))"
pack
printf '%s\n' "${summary[@]}"
grep -E "^(MoE|Dense)|Verdict" "$OUT/ledger-pp512-realistic.log" | cut -c1-200 | head -8
head -40 "$OUT/step-d0.txt"
