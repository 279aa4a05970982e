#!/usr/bin/env bash
# 2026-12-06, stop 47, the short form of stop47a.sh for what was left of the device time
# (~370 s after sixteen failed starts). Carry .carry/s47a.tar.xz (as stop47a.sh).
#   1. logits digests of an 8,192-token prompt (35B shapes, 4 layers): base, new, arm3;
#   2. prefill A/B/C on the 35B-A3B Q4_K_M file, pp8192 and pp32768: base (b3314df), new (gs256
#      with the consumers copying x), arm3 (new + TALLY_WSX=on), a second round while time allows.
# Prediction: as stop47a.sh (new +3% pp8192; arm3 +5-7% more; the same bits).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s47c s47a
mid_l4_files
RUN_TOKENS=8192 run_json base "$L4" "$B"
TALLY_WSX=off RUN_TOKENS=8192 run_json new "$L4" "$N"
TALLY_WSX=on RUN_TOKENS=8192 run_json arm3 "$L4" "$N"
row "digests l4 8192 base/new/arm3" "$(logits_same "$OUT" l4 base new arm3) ($(el))"
pack
synth_35b q4_k_m
ARM3="TALLY_WSX=on" AB_UNTIL=200 ab p2 "$F" -p 8192,32768 -n 0
printf '%s\n' "${summary[@]}"
