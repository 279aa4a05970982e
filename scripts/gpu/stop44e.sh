#!/usr/bin/env bash
# 2026-12-06, stop 44, call 5 (the last of the stop's device time; asked for an H200 only):
# the final code (6629d23: this stop's norms, early add_rms_norm loads in both kernels) side by
# side with llama.cpp. Carry .carry/s44final.tar.xz: bin/tally (dynamic-link peer), llama-lib,
# kcache.
#   the 35B-A3B Q4_K_M synth file; `tally bench --peer llama.cpp` pp512, pp8192 and tg128
#   (SBS_P, SBS_D: more lengths and depths where the device time allows); then tally alone,
#   speculative k = 3 at acceptance 0.8 while the call is under 240 s.
# Prediction (written before): on an H200, pp512 ~16.5k (issue 14: 16,000), pp8192 ~39.5k
# (45,000), pp32768 ~31.5k (35,000), tg128 ~335 (issue 13: 350), spec ~445; llama.cpp as in
# stop 32 (5.6k, 5.5k, 237). On an H100: as call 3 with tg128 ~324.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s44e s44final
synth_35b q4_k_m
pack
timeout 200 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p "${SBS_P:-512,8192}" -n 128 -d "${SBS_D:-0}" -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs" "rc=$? ($(el))"
pack
[ "$(( $(date +%s) - t0 ))" -lt 240 ] && timeout 60 "$N" bench -m "$F" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o json > "$OUT/spec.json" 2> "$OUT/spec.err"
row "spec k=3 a=0.8" "rc=$? $(bench_row "$OUT/spec.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/sbs.md"
