#!/usr/bin/env bash
# 2026-12-06, stop 40, second call (carry .carry/s40b.tar.xz: tar cJf .carry/s40b.tar.xz -C .carry
# bin/tally kcache llama-lib; bin/tally = the llama-dynamic build of the same tree): the mixes that
# stop40.sh leaves out: every mix side by side with llama.cpp at pp512, pp8192 and tg128 (issue 10
# item 5: mxfp4_moe, iq4_xs, q5_k_m, q8_0, q4_k_m), then Q4_K_M's longer rows (issues 13 and 14: pp2048,
# pp32768, tg128 after 8,192 and 32,768 tokens) while time is left (guards 440 and 420 s).
# Prediction (written before): on an H200 tally faster than llama.cpp at pp512 and pp8192 on
# every mix (q8_0 pp512 ~1.6x, the others 2.2-2.5x; pp8192 5-6.5x), tg128 1.3-1.36x; on an
# H100 stop 39's ratios within 3%.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s40b.tar.xz -C .carry
export TALLY="$PWD/.carry/bin/tally" TALLY_NOPEER="$PWD/.carry/bin/tally"
. scripts/gpu/env.sh
export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:$LD_LIBRARY_PATH"
gpu_job stop40b
T=$TALLY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
# The next mix's file is made while this one is measured.
mixes=(${MIXES:-mxfp4_moe iq4_xs q5_k_m q8_0 q4_k_m})
mk() { "$T" synth --preset 35b-a3b --quant $1 --seed 1 --fill pool --out $D/mix-$1.gguf -o json > "$OUT/synth-$1.json" 2>&1; }
mk ${mixes[0]}
for k in "${!mixes[@]}"; do
    mix=${mixes[$k]}
    next=${mixes[$((k + 1))]:-}
    nextpid=
    [ -n "$next" ] && [ "$(( $(date +%s) - t0 ))" -lt 400 ] && { mk $next & nextpid=$!; wait $nextpid; }
    if [ "$(( $(date +%s) - t0 ))" -lt 440 ]; then
        timeout 150 "$T" bench -m $D/mix-$mix.gguf --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
            --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2> "$OUT/bench-$mix.err"
        row "sbs $mix" "rc=$? ($(el))"
    else
        row "sbs $mix" "skipped (time)"
    fi
    [ $mix = q4_k_m ] || rm -f $D/mix-$mix.gguf
    [ -n "$nextpid" ] && wait $nextpid
    pack
done
f=$D/mix-q4_k_m.gguf
if [ -f $f ] && [ "$(( $(date +%s) - t0 ))" -lt 420 ]; then
    timeout $(( 560 - ($(date +%s) - t0) )) "$T" bench -m $f --backend cuda --peer llama.cpp -p 2048,32768 -n 128 -d 8192,32768 -r 3 \
        --out-dir "$OUT/sbs-long" > "$OUT/bench-long.md" 2> "$OUT/bench-long.err"
    row "sbs q4_k_m long" "rc=$? ($(el))"
fi
rm -f $D/mix-*.gguf
pack
grep -E '^\|' "$OUT"/bench-*.md 2> /dev/null | cut -d'|' -f1,7- | cut -c1-150
printf '%s\n' "${summary[@]}"
