#!/usr/bin/env bash
# 2026-12-07, stop 48, call 1. Carry .carry/s48a.tar.xz: bin/tally (main ec4135a with the
# dynamic-link llama.cpp peer), llama-lib, kcache (sm_90a). nvidia-smi samples the SM clock,
# power and throttle reasons every 100 ms the whole call (smi.csv; per stage in clocks.txt).
#   1. side by side with llama.cpp on the 35B-A3B Q4_K_M file: pp512, pp8192, pp32768, tg128;
#   2. the 4-layer file (35B shapes) at pp512/8192/32768: its per-layer time against the 40-layer
#      file's (on an H100, 4 layers x 10 came to ~49k tok/s at pp8192, the 40-layer file 39.9k);
#   3. whole-model A/B at pp512/8192/32768: default (TALLY_WSX=q6_k) twice as base/new (their gap
#      is the noise) and TALLY_WSX=off (arm3), alternated twice;
#   3b. each MoE layer's routing of an 8,192-token prompt (`tally run --routing`), 4 and 40 layers;
#   4. ncu's per-kernel time of the 40-layer file's 8,192-token prefill (to see which layers or
#      kernels take the 24% that the 4-layer file does not have).
# Prediction (written before): (1) on an H200 pp512 ~16k, pp8192 ~41k, pp32768 ~34.5k, tg128
# ~330, llama.cpp pp512 ~5.6k tg128 ~237; (2) the 40-layer file ~20% slower per layer at pp8192,
# with the SM clock under its 1,980 MHz maximum while the 40-layer file runs (power), not while
# the 4-layer one does; (3) arm3 (off) ~1.2% slower at pp8192, even at pp512.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s48a s48a
B=$N
smi_start
stage start
mid_l4_files
synth_35b q4_k_m
stage sbs
timeout 240 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs" "rc=$? ($(el))"
stage sbs-end
pack
stage l4
timeout 100 "$N" bench -m "$L4" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/l4.json" 2> "$OUT/l4.err"
row "l4 (4 layers)" "rc=$? $(bench_row "$OUT/l4.json") ($(el))"
stage l40
timeout 100 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/l40.json" 2> "$OUT/l40.err"
row "l40 (40 layers)" "rc=$? $(bench_row "$OUT/l40.json") ($(el))"
stage routing
for x in l4:"$L4" l40:"$F"; do
    timeout 60 "$N" run --model "${x#*:}" --backend cuda --tokens 8192 -n 0 --routing -o json > "$OUT/routing-${x%%:*}.json" 2> "$OUT/routing-${x%%:*}.err"
    row "routing ${x%%:*} 8192" "rc=$? ($(el))"
done
stage ab
pack
ARM3="TALLY_WSX=off" AB_UNTIL=400 ab p3 "$F" -p 512,8192,32768 -n 0
stage ncu
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
left=$(( 570 - $(date +%s) + t0 ))
if [ "$left" -gt 60 ]; then
    timeout "$left" ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu40.csv" \
        "$N" run --model "$F" --backend cuda --tokens 8192 -n 0 > "$OUT/ncu40.out" 2>&1
    row "ncu 40 layers pp8192" "rc=$? ($(el))"
    python3 tools/gpu/ncu_kernels.py "$OUT/ncu40.csv" > "$OUT/kernels40-pp8192.txt" 2>&1
    gzip -f "$OUT/ncu40.csv"
fi
smi_stop
row "clocks" "$(wc -l < "$OUT/smi.csv") samples"
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
head -30 "$OUT/sbs.md"
[ -f "$OUT/kernels40-pp8192.txt" ] && head -30 "$OUT/kernels40-pp8192.txt"
