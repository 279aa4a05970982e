#!/usr/bin/env bash
# 2026-12-07, stop 51: tg128 (pp512 beside) of the 35B-A3B files per mix with gemvi and mmvi on
# (the defaults since 2e22a4c), for issue 10's per-byte clause (stop 50: IQ4_XS 17% and MXFP4
# 24% slower per file byte than Q4_K_M in decode). Carry .carry/bin (tally-nopeer) and
# .carry/kcache. One round per mix in MIXES order, a second while the call is under LIMIT.
# Prediction: IQ4_XS and MXFP4 gain like Q4_K_M (+8%: gemvi at 4 blocks for both; mmvi at 3
# for IQ4_XS, 2 for MXFP4), so their per-byte gaps stay about where they were.
set -u
LIMIT=${LIMIT:-230}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
N=$PWD/.carry/bin/tally-nopeer
export TALLY=$N TALLY_NOPEER=$N
gpu_job s51c
gpu_and_dir
for mix in ${MIXES:-q4_k_m mxfp4_moe iq4_xs}; do
    [ "$(( $(date +%s) - t0 ))" -lt "$LIMIT" ] || break
    F=$D/$mix.gguf
    "$N" synth --preset 35b-a3b --quant "$mix" --seed 1 --fill pool --out "$F" > "$OUT/synth-$mix.log" 2>&1
    row "synth $mix" "$(stat -c %s "$F") bytes ($(el))"
    for r in 1 2; do
        [ $r = 1 ] || [ "$(( $(date +%s) - t0 ))" -lt "$LIMIT" ] || continue
        timeout 60 "$N" bench -m "$F" --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$mix-$r.json" 2> "$OUT/tg-$mix-$r.err"
        row "tg $mix $r" "rc=$? $(bench_row "$OUT/tg-$mix-$r.json") ($(el))"
    done
    rm -f "$F"
    pack
done
pack
printf '%s\n' "${summary[@]}"
