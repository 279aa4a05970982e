#!/usr/bin/env bash
# 2026-12-07, stop 48: stop48c.sh's most decisive parts, in the order that a short call needs
# (device time ran low after many failed starts). Carry .carry/s48b.tar.xz (as stop48c.sh).
#   1. lab: the head (Q6_K, 248,320 x 2,048) on gemv4 / gemvr / gemvt / gemvt2 at one x row and
#      gemvr4 / gemvt4 at 2-4 rows, each checked against the CPU;
#   2. logits digests of the 4-layer file with TALLY_GEMVT=off/4/2;
#   3. the 4-layer and the 40-layer file at pp8192 and pp32768 with the SM clock and power
#      sampled (per stage in clocks.txt);
#   4. tg128 of the 40-layer file, TALLY_GEMVT off / 4 alternated.
# Predictions: as stop48c.sh's.
set -u
cd "$(dirname "$0")/../.."
LIMIT=${LIMIT:-400}
. scripts/gpu/env.sh
ab_start s48e s48b
smi_start
stage lab
timeout 90 .carry/lab/gemm_bench --decode --head > "$OUT/lab-head.txt" 2>&1
row "lab head" "rc=$? ($(el))"
grep -E "time output head|FAIL" "$OUT/lab-head.txt" | head -12 >> "$OUT/summary.txt"
pack
stage digests
mid_l4_files
for v in off 4 2; do TALLY_GEMVT=$v run_json "$v" "$L4"; done
row "digests l4 gemvt off/4/2" "$(logits_same "$OUT" l4 off 4 2) ($(el))"
stage l4
timeout 60 "$N" bench -m "$L4" --backend cuda -p 8192,32768 -n 0 -r 3 -o json > "$OUT/l4.json" 2> "$OUT/l4.err"
row "l4 (4 layers)" "rc=$? $(bench_row "$OUT/l4.json") ($(el))"
pack
stage synth
synth_35b q4_k_m
stage l40
timeout 80 "$N" bench -m "$F" --backend cuda -p 8192,32768 -n 0 -r 3 -o json > "$OUT/l40.json" 2> "$OUT/l40.err"
row "l40 (40 layers)" "rc=$? $(bench_row "$OUT/l40.json") ($(el))"
pack
stage tg
for round in 1 2; do
    for v in off 4; do
        [ "$(( $(date +%s) - t0 ))" -lt $(( LIMIT - 35 )) ] || continue
        TALLY_GEMVT=$v timeout 60 "$N" bench -m "$F" --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg128 gemvt=$v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
    done
done
smi_stop
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
