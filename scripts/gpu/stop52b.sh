#!/usr/bin/env bash
# 2026-12-07, stop 52: issue 10's per-mix side by side on whatever GPU comes (an H200 came for
# stop52a/stop51b): each 35B-A3B synth mix (seed 1, pool fill) against llama.cpp, pp512 and
# pp8192 and tg128, one file at a time (written, benched, removed). Carry .carry/s51.tar.xz
# (tally a7d2a98 with the dynamic-link peer and llama.cpp's CUDA libraries) on the warm machine
# after stop51b.sh (its kernel cache). MIXES (default: mxfp4_moe iq4_xs q5_k_m q8_0); a mix
# starts only while the call is under LIMIT seconds.
set -u
LIMIT=${LIMIT:-430}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
mkdir -p .carry/kcache
ab_start s52b s51
for mix in ${MIXES:-mxfp4_moe iq4_xs q5_k_m q8_0}; do
    [ "$(( $(date +%s) - t0 ))" -lt "$LIMIT" ] || break
    synth_35b "$mix"
    timeout 200 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
        -o md --out-dir "$OUT/bench-$mix" > "$OUT/bench-$mix.md" 2> "$OUT/bench-$mix.err"
    row "bench $mix" "rc=$? ($(el))"
    rm -f "$F"
    pack
done
pack
printf '%s\n' "${summary[@]}"
for f in "$OUT"/bench-*.md; do echo "== $f"; grep -E "pp512|pp8192|tg128" "$f"; done
