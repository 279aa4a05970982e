#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call9).
# 2026-12-05, stop 37, call 9: the final code (df85203: 308b97f's kernels with the delta helpers'
# unused cp.async wrappers removed) against 308b97f's build, which calls 5, 6 and 8 measured:
# logits digests on mid q4_k_m at 1,000 tokens and on the 35B shapes with 4 layers at 600 tokens
# (the same bits expected: the same machine code), and tally check mid 1000.
# Prediction (written before): digests equal, check passes.
# HERE first: cargo build --release -> .carry/bin/tally-new; .carry/bin/tally-nopeer = 308b97f's
# build; kernels into .carry/kcache; tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer
# bin/tally-new kcache.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37i
B=$TALLY_NOPEER
N=$PWD/.carry/bin/tally-new
mid_l4_files
for f in $MID $L4; do
    n=$(basename $f .gguf)
    tok=1000; [ $f = $L4 ] && tok=600
    timeout 90 "$B" run --model $f --backend cuda --tokens $tok -n 6 -o json > "$OUT/run-$n-B.json" 2> "$OUT/run-$n-B.err"
    timeout 90 "$N" run --model $f --backend cuda --tokens $tok -n 6 -o json > "$OUT/run-$n-N.json" 2> "$OUT/run-$n-N.err"
    row "digests $n $tok base == final" "$(logits_same "$OUT" $n B N) ($(el))"
done
timeout 90 "$N" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (final)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
pack
printf '%s\n' "${summary[@]}"
