#!/usr/bin/env bash
# GPU call 1 of 2 (2026-12-01, third session). While llama.cpp's CUDA libraries build and the
# 35B-A3B Q4_K_M synth file is written (scripts/gpu/prepare.sh, in the background):
#   1. the reshaped backend against the CPU, poisoned (scripts/gpu/reshape.sh's checks are in
#      check.sh: tiny q8_0, tiny-odd bf16, tiny q4_k_m, mid q4_k_m; labs gemm/delta/attention);
#   2. round2-a.sh's own checks: cold start, mid q3_k_m, tiny and mid q2_k, converter fixtures.
# Everything lands under /tmp/o and comes back as one archive ($OUT/r3a.tgz; the 8-file limit).
# Call 2 (scripts/gpu/round3-b.sh) must follow within 30 s.
set -u
cd "$(dirname "$0")/../.."
REAL_OUT=$OUT
export OUT=/tmp/o; mkdir -p $OUT
t0=$(date +%s)
( scripts/gpu/prepare.sh > "$OUT/prepare.txt" 2>&1 ) &
prep=$!
# round2-a waits for prepare itself; run check.sh first without the mid bench (no peer needed).
TALLY=$PWD/.carry/bin/tally-nopeer timeout 330 scripts/gpu/check.sh --quick > "$OUT/check.txt" 2>&1; echo "check rc=$? at $(( $(date +%s) - t0 )) s"
sed -n '/== summary ==/,$p' "$OUT/check.txt"
SKIP_PREPARE=1 timeout $(( 560 - ($(date +%s) - t0) )) scripts/gpu/round2-a.sh > "$OUT/round2a.txt" 2>&1; echo "round2-a rc=$? at $(( $(date +%s) - t0 )) s"
sed -n '/== converter/,$p' "$OUT/round2a.txt" | tail -20
wait $prep
tail -3 "$OUT/prepare.txt"
tar czf "$REAL_OUT/r3a.tgz" -C /tmp o
echo "round3-a: $(( $(date +%s) - t0 )) s"
