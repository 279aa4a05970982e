#!/usr/bin/env bash
# 2026-12-07, stop 50: speed on every mix (issue 10 item 5), after stop50b.sh on the same warm
# machine (or alone: it unpacks the same .carry/s50.tar.xz). For each mix of MIXES (default
# q5_k_m q8_0 iq4_xs mxfp4_moe; q4_k_m is stop50b.sh's file): the 35B-A3B synth file (pool fill,
# seed 1), `tally bench --peer llama.cpp -p 512,8192 -n 128 -r 3`, then the file is deleted.
# Mixes that would start after LIMIT - 110 s are skipped (a row says so).
# Predictions (stop 41-47 kernels; 2026-12-02's table had pp512 0.69x on q8_0, 0.95x on
# mxfp4_moe): every mix faster than llama.cpp at pp512 and pp8192 now (pp512 ~11-15k against
# ~5.5-6.4k); tg128 ahead of llama.cpp on every mix.
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s50d s50
rm -f "$D"/q4_k_m.gguf /tmp/l4.gguf /tmp/mid-q4_k_m.gguf
for mix in ${MIXES:-q5_k_m q8_0 iq4_xs mxfp4_moe}; do
    if [ "$(( $(date +%s) - t0 ))" -ge $(( LIMIT - 110 )) ]; then
        row "$mix" "skipped (time)"
        continue
    fi
    synth_35b "$mix"
    timeout 160 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
        -o md --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2> "$OUT/bench-$mix.err"
    row "bench $mix" "rc=$? ($(el))"
    rm -f "$F"
    pack
done
printf '%s\n' "${summary[@]}"
for mix in ${MIXES:-q5_k_m q8_0 iq4_xs mxfp4_moe}; do
    echo "== $mix"
    grep -E '^\| ' "$OUT/bench-$mix.md" 2> /dev/null | tail -6
done
