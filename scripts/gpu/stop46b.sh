#!/usr/bin/env bash
# 2026-12-06, stop 46, call 2. Carry .carry/s46 (as call 1). Why gs256 gained only 3% in the lab
# (Q4_K 35B gate/up at 8,192 tokens: gs128 0.977 ms, gs256 0.948; predicted ~0.65):
#   1. ncu --set full of one gs128 and one gs256 launch at 8,192 tokens (lab `--gated --only q4_k
#      --only-time`: the 4th token count; 23 launches a timing), their details pages and the
#      per-instruction stall samples split at the barriers (tools/gpu/ncu_stalls.py);
#   2. ncu's device time per kernel of one 8,192-token prefill of the 35B shapes with 4 layers,
#      TALLY_WS256=on (the per-kernel table since stop 43's).
# Prediction (written before): gs256 bound by its x copies (64 KB a block and K step, issued one
# step ahead: L2 -> SM throughput near its ceiling, long-scoreboard / barrier stalls in the
# consumers' FULL wait); gs128 by the decoders' decode and A stores (issue-limited decoder warps).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/s46/kcache ] && rm -rf .carry/kcache && cp -r .carry/s46/kcache .carry/kcache
ab_start s46b none
N=$PWD/.carry/s46/bin/tally
export TALLY=$N TALLY_NOPEER=$N
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for k in gs128 gs256; do
    timeout 150 ncu --set full -k regex:gemm_q4_k_$k --launch-skip 69 -c 1 -o "$OUT/$k" \
        .carry/s46/lab/gemm_bench --gated --only q4_k --only-time > "$OUT/ncu-$k.out" 2>&1
    row "ncu $k" "rc=$? ($(el))"
    ncu -i "$OUT/$k.ncu-rep" --page details --csv > "$OUT/$k-details.csv" 2>&1
    ncu -i "$OUT/$k.ncu-rep" --page source --print-source sass --csv > "$OUT/$k-source.csv" 2>&1
    python3 tools/gpu/ncu_stalls.py "$OUT/$k-source.csv" 12 > "$OUT/$k-stalls.txt" 2>&1
    gzip -f "$OUT/$k-source.csv"
    rm -f "$OUT/$k.ncu-rep"
    pack
done
mid_l4_files
TALLY_WS256=on ncu_prefill "$L4" 8192
pack
printf '%s\n' "${summary[@]}"
for k in gs128 gs256; do
    echo "== $k"
    python3 - "$OUT/$k-details.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
want = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "L1/TEX Cache Throughput",
        "L2 Cache Throughput", "DRAM Throughput", "Issue Slots Busy", "Eligible Warps Per Scheduler",
        "Active Warps Per Scheduler", "No Eligible", "Registers Per Thread", "Achieved Occupancy")
h = rows[0]
for r in rows[1:]:
    d = dict(zip(h, r))
    if d.get("Metric Name") in want:
        print(f'{d.get("Section Name","")[:28]:28} {d["Metric Name"]:34} {d.get("Metric Value","")} {d.get("Metric Unit","")}')
PY
    head -30 "$OUT/$k-stalls.txt"
done
head -25 "$OUT/kernels-pp8192.txt"
