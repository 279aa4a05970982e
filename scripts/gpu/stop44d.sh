#!/usr/bin/env bash
# 2026-12-06, stop 44, call 4: run inline on call 3's still-warm machine (the 35B file in
# /dev/shm, .carry/s44sbs.tar.xz carried again): decode's add_rms_norm early (the default since
# this call) against the decode kernel interleaved, tg128 at depth 0 and 8,192, and speculative
# k = 3 at acceptance 0.8 with the early form. Results: docs/results/2026-12-06-stop44/call4/.
# (64d6210's build: its TALLY_ADD_NORM_LOADS=early is today's default, its default today's
# TALLY_ADD_NORM_LOADS=prefill.)
set -u
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.carry/llama-lib:${LD_LIBRARY_PATH:-}
tar xJf .carry/s44sbs.tar.xz -C .carry
. scripts/gpu/env.sh
F=/dev/shm/q4_k_m.gguf; [ -f $F ] || F=/tmp/q4_k_m.gguf
export TALLY_CACHE=/tmp/tally-cache
for e in early prefill; do
    TALLY_ADD_NORM_LOADS=$e timeout 100 .carry/bin/tally bench -m $F --backend cuda -p 1 -n 128 -d 0,8192 -r 3 -o json > /tmp/d-$e.json 2>/dev/null
    echo "$e $(bench_row /tmp/d-$e.json)"
done
TALLY_ADD_NORM_LOADS=early timeout 60 .carry/bin/tally bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o json > /tmp/spec-early.json 2>/dev/null
echo "spec early $(bench_row /tmp/spec-early.json)"
mkdir -p "$OUT"; cp /tmp/d-*.json /tmp/spec-early.json "$OUT"/
