#!/usr/bin/env bash
# The session's last check of the committed code: `tally check --backend cuda` on mid q4_k_m at
# 1,000 tokens, and speculative decoding k = 3 at replayed acceptance 0.8 on the 35B-A3B Q4_K_M
# synth file with MTP, twice in one process's lifetime each (the bench's windows re-run the
# generation: per-token states enabled once, kept) held to plain greedy decoding's tokens.
# Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job fs
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
"$T" synth --preset mid --quant q4_k_m --seed 4 --out /tmp/mid.gguf > /dev/null 2>&1
timeout 100 "$T" check --model /tmp/mid.gguf --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid q4_k_m tokens=1000" "rc=$? ($(el))"
wait $SYNTH
timeout 120 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 \
    -o md > "$OUT/spec.md" 2> "$OUT/spec.err"
row "spec k=3 a=0.8" "rc=$? $(grep -ohE '[0-9.]+ t/s vs [0-9.]+ t/s plain greedy in the same windows: [0-9.]+x; per window verify [0-9.]+ s' "$OUT/spec.md") ($(el))"
pack
printf '%s\n' "${summary[@]}"
