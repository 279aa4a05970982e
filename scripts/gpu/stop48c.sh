#!/usr/bin/env bash
# 2026-12-07, stop 48, one call for an H100 (or an H200 without the llama.cpp peer): stop48a's
# questions without the side by side, then stop48b's. Carry .carry/s48b.tar.xz (bin/tally:
# 104f13b, main plus the opt-in gemvt, no peer; lab/gemm_bench; kcache). nvidia-smi samples the
# SM clock, power and throttle reasons every 100 ms (smi.csv; per stage in clocks.txt).
#   1. the 4-layer file (35B shapes) and the 40-layer file at pp512/8192/32768: per-layer time
#      (on an H100, 4 layers x 10 came to ~49k tok/s at pp8192, the 40-layer file 39.9k);
#   2. each MoE layer's routing of an 8,192-token prompt (`tally run --routing`), 4 and 40 layers;
#   3. the head GEMV in the lab (gemv4 / gemvr / gemvt / gemvt2, checked) and ncu of its kernels;
#   4. logits digests of the 4-layer file with TALLY_GEMVT=off/4/2, tg128 off/4/2 alternated;
#   5. TALLY_WSX q6_k (default) vs off on the 40-layer file (pp512/8192/32768);
#   6. ncu's per-kernel time of the 40-layer file's 8,192-token prefill.
# Predictions (written before): (1) the 40-layer file ~20% slower per layer at pp8192, the SM
# clock under its maximum while it runs (power), not while the 4-layer one does; (3) gemvr
# 2.2-2.5 TB/s on an H100... 2.1 (ncu had 190 us), gemvt ~2.8-3.0 TB/s; (4) same digests, tg128
# +1.5-2%; (5) off ~1.2% slower at pp8192.
set -u
# LIMIT: the seconds this call may take (the run's timeout less ~30 s).
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s48c s48b
smi_start
stage start
mid_l4_files
synth_35b q4_k_m
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
pack
stage lab
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 100 .carry/lab/gemm_bench --decode --head > "$OUT/lab-head.txt" 2>&1
row "lab head" "rc=$? ($(el))"
grep -E "time output head" "$OUT/lab-head.txt" | head -8 >> "$OUT/summary.txt"
timeout 90 ncu --kernel-name regex:'gemv(r|t|t2)_q6_k' --launch-count 3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
    .carry/lab/gemm_bench --decode --head > "$OUT/ncu-head.txt" 2>&1
row "ncu head" "rc=$? ($(el))"
pack
stage gemvt
for v in off 4 2; do TALLY_GEMVT=$v run_json "$v" "$L4"; done
row "digests l4 gemvt off/4/2" "$(logits_same "$OUT" l4 off 4 2) ($(el))"
for round in 1 2; do
    for v in off 4 2; do
        [ "$(( $(date +%s) - t0 ))" -lt $(( LIMIT - 40 )) ] || continue
        TALLY_GEMVT=$v timeout 100 "$N" bench -m "$F" --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg128 gemvt=$v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
    done
done
pack
stage ab
B=$N ARM3="TALLY_WSX=off" AB_UNTIL=$(( LIMIT - 135 )) ab p3 "$F" -p 512,8192,32768 -n 0
stage ncu
left=$(( LIMIT - $(date +%s) + t0 ))
if [ "$left" -gt 50 ]; then
    timeout "$left" ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu40.csv" \
        "$N" run --model "$F" --backend cuda --tokens 8192 -n 0 > "$OUT/ncu40.out" 2>&1
    row "ncu 40 layers pp8192" "rc=$? ($(el))"
    python3 tools/gpu/ncu_kernels.py "$OUT/ncu40.csv" > "$OUT/kernels40-pp8192.txt" 2>&1
    gzip -f "$OUT/ncu40.csv"
fi
smi_stop
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
grep -E "gemv(r|t|t2)_q6_k|Duration|DRAM Throughput|L1/TEX Cache Throughput|Issued Warp|Warp Cycles Per Issued|Registers Per|Achieved Occupancy" "$OUT/ncu-head.txt" | head -30
