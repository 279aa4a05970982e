#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call2).
# 2026-12-05, stop 37, call 2: call 1's lab half again with the harness mended (its DeltaArgs
# was not zeroed, so the step kernel read garbage prologue pointers: rc 2 in both builds) and
# with --profile (one chunked prep + scan at T tokens) for ncu, which call 1 ran on the T = 1
# case. (1) lab/delta old (HEAD) and new (loads batched): checks + timing. (2) ncu of the
# T = 8,192 prep (old and new) and scan: sections, per-instruction stall samples.
# Prediction (written before; call 1 measured the engine's pp8192 +2.3%, so ~5 ms of 30 layers):
# lab prep at T=8192 0.65 -> ~0.48 ms; scan 0.50 both.
# HERE first: nvcc lab/delta/bench.cu (old tree with the mended harness, new tree) ->
# .carry/lab/delta_{old,new}; tar cJf .carry/new.tar.xz -C .carry lab/delta_old lab/delta_new.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37b
for v in old new; do
    timeout 150 .carry/lab/delta_$v > "$OUT/lab-delta-$v.txt" 2>&1
    row "lab delta $v" "rc=$? $(grep -E 'SUMMARY' "$OUT/lab-delta-$v.txt") ($(el))"
    grep -E "^  chunked T=" "$OUT/lab-delta-$v.txt" | awk -v v=$v '{print v, $2, "total", $3, "prep", $4, "scan", $5}' >> "$OUT/lab-times.txt"
done
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for kv in prep:new scan:new prep:old; do
    k=${kv%%:*}; v=${kv##*:}
    timeout 120 ncu --clock-control none -k regex:delta_rule_chunk_$k --launch-count 1 --set full \
        --import-source no -o "$OUT/ncu-$k-$v" .carry/lab/delta_$v --profile 8192 > "$OUT/ncu-$k-$v.log" 2>&1
    ncu -i "$OUT/ncu-$k-$v.ncu-rep" --page details > "$OUT/ncu-$k-$v-details.txt" 2>&1
    ncu -i "$OUT/ncu-$k-$v.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-$k-$v-sass.csv" 2>&1
    gzip -f "$OUT/ncu-$k-$v-sass.csv"
    rm -f "$OUT/ncu-$k-$v.ncu-rep"
    row "ncu $k $v 8192" "$(grep -E ' Duration|Achieved Occupancy' "$OUT/ncu-$k-$v-details.txt" | head -2 | tr -s ' ' | tr '\n' ';') ($(el))"
done
pack
cat "$OUT/lab-times.txt"
printf '%s\n' "${summary[@]}"
