#!/usr/bin/env bash
# 2026-12-06, stop 47, the shortest form (~2 minutes, for the ~280 s of device time left after
# the failed starts). Carry .carry/s47a.tar.xz (as stop47a.sh).
#   1. prefill A/B/C on the 4-layer 35B-shaped Q4_K_M file (no 70 s synth of the whole model):
#      pp8192 and pp32768, base / new / arm3 (as stop47a.sh), twice;
#   2. logits digests of an 8,192-token prompt of the same file, base / new / arm3.
# Prediction: per layer as stop47a.sh (new against base -3% gate/up time, arm3 -20-30% down
# time); on 4 layers the head and embedding dilute it: new +2%, arm3 +4-6% at pp8192.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s47d s47a
mid_l4_files
row "l4 file" "$(el)"
ARM3="TALLY_WSX=on" ab l4 "$L4" -p 8192,32768 -n 0
RUN_TOKENS=8192 run_json base "$L4" "$B"
TALLY_WSX=off RUN_TOKENS=8192 run_json new "$L4" "$N"
TALLY_WSX=on RUN_TOKENS=8192 run_json arm3 "$L4" "$N"
row "digests l4 8192 base/new/arm3" "$(logits_same "$OUT" l4 base new arm3) ($(el))"
pack
printf '%s\n' "${summary[@]}"
