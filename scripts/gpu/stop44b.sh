#!/usr/bin/env bash
# 2026-12-06, stop 44, call 2: prefill's memory-bound kernels against their byte floor,
# norm_rows_w's register form and add_rms_norm's loads issued first. Carry .carry/s44c.tar.xz
# (bin/tally: this tree: norm_rows_w loads every input of a lane before its reduction and reads
# x once; add_rms_norm's register form issues every load, the MoE combine's eight expert rows
# included, before the first use (the SASS of 422e8f8's waits for each element's eight rows
# before loading the next element's); bin/tally-base: 422e8f8's; kcache with the variants).
#   1. ncu sections (speed of light, memory workload, occupancy, warp states, launch; DRAM bytes)
#      of add_rms_norm_256, norm_rows_w, conv_silu, the casts, x_f16_perm and binary_map in one
#      8,192-token prefill of the 4-layer file (the 35B shapes), base and new;
#   2. logits digests (37-token prefill + 6 steps): new == TALLY_NORM=warp-loop == TALLY_NORM=block
#      == TALLY_ADD_NORM_LOADS=late == TALLY_ADD_NORM_BLOCKS=2 == base, mid q4_k_m and the 4-layer file;
#   3. A/B, 35B-A3B Q4_K_M: base / new / new with TALLY_ADD_NORM_BLOCKS=2 (128 registers, two
#      blocks a multiprocessor, where the default's 184 fit one): pp512 and pp8192; then base /
#      new / TALLY_ADD_NORM_LOADS=late-decode (the decode kernel spills 20 bytes early): tg128.
# Prediction (written before): (1) DRAM bytes near the counted ones (no re-reads), DRAM
# throughput 45-60% of peak in the norms, stalls mostly long scoreboard (too few bytes in flight:
# 4-byte loads, one row or group a warp/block, a reduction before the stores); the new
# norm_rows_w: gated norm 236 -> ~150 us, q/k L2 155 -> ~100 us at 8,192 tokens;
# add_rms_norm_256 with the combine 462 -> ~330 us, without 114 -> ~95. (2) same.
# (3) pp8192 +4-5% (~10 ms of 222), pp512 +2-3%; blocks=2 a little more; tg128 +1-2%.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s44b s44c
L4=/tmp/l4-pool.gguf
[ -f "$L4" ] || "$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --set n_layers=4 --out "$L4" > "$OUT/synth.log" 2>&1
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for v in base new; do
    bin=$N; [ $v = base ] && bin=$B
    "$bin" run --model "$L4" --backend cuda --tokens 8192 -n 0 > /dev/null 2>&1
    timeout 240 ncu --clock-control none --kernel-name 'regex:^(add_rms_norm_256|norm_rows_w|conv_silu|cast_f16_rows|x_f16_perm|binary_map)$' \
        --launch-count 40 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        --csv --page details --log-file "$OUT/ncu-norms-$v.csv" \
        "$bin" run --model "$L4" --backend cuda --tokens 8192 -n 0 > "$OUT/ncu-norms-$v.out" 2>&1
    row "ncu sections $v" "rc=$? $(wc -l < "$OUT/ncu-norms-$v.csv") lines ($(el))"
    python3 - "$OUT/ncu-norms-$v.csv" > "$OUT/norms-table-$v.txt" 2>&1 <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if not l.startswith("=="))]
h = rows[0]
ix = {k: h.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value", "Metric Unit")}
per = {}
for r in rows[1:]:
    k = (int(r[ix["ID"]]), r[ix["Kernel Name"]], r[ix["Grid Size"]])
    per.setdefault(k, {})[r[ix["Metric Name"]]] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
want = ["Duration", "dram__bytes_read.sum", "dram__bytes_write.sum", "DRAM Throughput", "Memory Throughput",
        "Achieved Occupancy", "Theoretical Occupancy", "Registers Per Thread", "L2 Hit Rate", "L1/TEX Hit Rate",
        "Warp Cycles Per Issued Instruction", "Stall Long Scoreboard"]
print("id kernel grid | " + " | ".join(want))
for (i, k, g), m in sorted(per.items()):
    print(i, k, g, "|", " | ".join(f"{m[w][0]} {m[w][1]}" if w in m else "-" for w in want))
PY
    pack
done
mid_l4_files
for f in $MID $L4; do
    run_json base "$f" "$B"; run_json new "$f" "$N"
    TALLY_NORM=warp-loop run_json loop "$f" "$N"; TALLY_NORM=block run_json block "$f" "$N"
    TALLY_ADD_NORM_LOADS=late run_json late "$f" "$N"; TALLY_ADD_NORM_BLOCKS=2 run_json b2 "$f" "$N"
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename "$f" .gguf)" base new loop block late b2)"
done
pack
synth_35b q4_k_m
ARM3="TALLY_ADD_NORM_BLOCKS=2" AB_UNTIL=520 ab pp "$F" -p 512,8192 -n 0
ARM3="TALLY_ADD_NORM_LOADS=late-decode" AB_UNTIL=500 ab tg "$F" -p 1 -n 128
printf '%s\n' "${summary[@]}"
head -3 "$OUT/norms-table-base.txt"; for v in base new; do echo "== $v"; grep -E "add_rms|norm_rows_w" "$OUT/norms-table-$v.txt" | head -6 | cut -c1-330; done
