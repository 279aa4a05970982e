#!/usr/bin/env bash
# Issue 13: add_rms_norm's register form (rows of at most 4 values a thread: every input loaded
# before any output is written; bit for bit the loop form). Checks: logits digests on mid q4_k_m
# and the 4-layer 35B-shaped file, default == TALLY_NORM=block (the loop form and norm_rows);
# `tally check --backend cuda` on mid q4_k_m at 64 tokens. Then the 35B-A3B Q4_K_M synth file:
# tg128 ABAB (block, default), and an ncu per-kernel table of one pp8192 prefill (issue 14).
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin, .carry/kcache. Everything in $OUT/n.tgz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/kcache ] && cp -r .carry/kcache /tmp/tally-cache && export TALLY_CACHE=/tmp/tally-cache
work_dir /tmp/n
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
pack() { cp "$OUT/summary.txt" "$REAL_OUT/summary.txt"; tar -C /tmp -czf "$REAL_OUT/n.tgz" n; }
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 64 -n 3 > "$OUT/check-mid-64.log" 2>&1
row "check mid q4_k_m tokens=64" "rc=$? ($(el))"
for f in $MID $L4; do
    run_json warp $f
    TALLY_NORM=block run_json block $f
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename $f .gguf)" warp block) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for v in block warp block warp; do
    TALLY_NORM=$v timeout 150 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$(date +%s).json" 2> "$OUT/tg-$v.err"
    row "tg128 norm=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/tg-$v-*.json | head -1)") ($(el))"
done
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-pp8192.csv" \
    "$T" run --model $F --backend cuda --tokens 8192 -n 0 > "$OUT/ncu-pp8192.out" 2>&1
python3 tools/gpu/ncu_kernels.py "$OUT/ncu-pp8192.csv" > "$OUT/kernels-pp8192.txt" 2>&1
row "ncu pp8192" "$(head -1 "$OUT/kernels-pp8192.txt") ($(el))"
gzip -f "$OUT/ncu-pp8192.csv"
pack
printf '%s\n' "${summary[@]}"
head -40 "$OUT/kernels-pp8192.txt"
