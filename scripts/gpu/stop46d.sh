#!/usr/bin/env bash
# 2026-12-06, stop 46, call 4 (what was left of the device time: ~150 s). Carry .carry/s46 (the
# binaries of stop46c.sh: xs128 and gs256 with the consumers copying x).
#   1. prefill A/B on the 35B-A3B Q4_K_M file: TALLY_WSX=off / on, pp8192 and pp32768, once;
#   2. logits digests of an 8,192-token prompt and six decode steps (35B shapes, 4 layers),
#      TALLY_WSX=off / on (the same bits expected).
# Prediction (written before): xs128 pp8192 +5-7%, pp32768 +3%; the same bits.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/s46/kcache ] && rm -rf .carry/kcache && cp -r .carry/s46/kcache .carry/kcache
ab_start s46d none
N=$PWD/.carry/s46/bin/tally
export TALLY=$N TALLY_NOPEER=$N
synth_35b q4_k_m
for v in off on; do
    TALLY_WSX=$v timeout 60 "$N" bench -m "$F" --backend cuda -p 8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v.json" 2> "$OUT/pp-$v.err"
    row "pp wsx=$v" "rc=$? $(bench_row "$OUT/pp-$v.json") ($(el))"
    pack
done
mid_l4_files
for v in off on; do
    TALLY_WSX=$v RUN_TOKENS=8192 run_json $v "$L4" "$N"
done
row "digests l4 8192 wsx off/on" "$(logits_same "$OUT" l4 off on) ($(el))"
pack
printf '%s\n' "${summary[@]}"
