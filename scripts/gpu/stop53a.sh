#!/usr/bin/env bash
# 2026-12-07, stop 53, call 1 (issue 13 item 1, issue 14's plan): on whatever GPU comes, with
# tally af8bc72 (main: the engine of stop 52, the ledger's same-run check (a)) built with the
# dynamic-link llama.cpp peer. Carry .carry/s53a.tar.xz (bin/tally, llama-lib, kcache: the tree
# and the tarball together are just under the 64 MiB carry limit).
#   1. the 35B-A3B Q4_K_M synth file (seed 1, pool fill);
#   2. ncu's device time per kernel of its 8,192-token prefill (the H200's table; stop 48's was
#      an H100's);
#   3. the routing of an 8,192-token prompt (`tally run --routing`): rows per expert, for the
#      MoE tiles' fill;
#   4. the decode-step ledger at depth 512 against llama.cpp (`tally ledger --step-at 512`), with
#      what is left of the call. The last H200 attempt (2026-12-02) gave no verdict; since then
#      (a) and (b) compare the time inside the nodes, not the observed run's wall time.
# Prediction (written before): (2) the MoE tiles ~37% and the delta rule ~12% as on the H100;
# (4) observing costs +200-300% of a ~2.7 ms step, but (a)/(b) within 10% now: a verdict, tally
# faster (llama.cpp's step ~4.2 ms).
set -u
LIMIT=${LIMIT:-570}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s53a s53a
smi_start
stage synth
synth_35b q4_k_m
pack
stage ncu
ncu_prefill "$F" 8192 "$N"
pack
stage routing
timeout 60 "$N" run --model "$F" --backend cuda --tokens 8192 -n 0 --routing -o json > "$OUT/routing-8192.json" 2> "$OUT/routing.err"
row "routing 8192" "rc=$? ($(el))"
gzip -f "$OUT/routing-8192.json"
pack
stage ledger
left=$(( LIMIT - $(date +%s) + t0 - 15 ))
"$N" machine --backend cuda -o json > "$OUT/machine.json" 2>&1
timeout "$left" "$N" ledger --model "$F" --backend cuda --peer llama.cpp --step-at 512 -r 5 \
    --busy-limit 64 --out-dir "$OUT/ledger-d512" > "$OUT/ledger-d512.txt" 2>&1
row "ledger d512" "rc=$? ($(el))"
smi_stop
pack
printf '%s\n' "${summary[@]}"
head -25 "$OUT/kernels-pp8192.txt"
head -40 "$OUT/ledger-d512.txt"
