#!/usr/bin/env bash
# Why the decode kernels run where they do (issue 13): ncu's speed-of-light, memory, occupancy and
# warp-stall sections for the main decode kernels of one step on the 4-layer 35B-shaped file
# (scripts/gpu/profile-decode.sh's model): the qkv / z / out GEMVs (gemv_q4_k), the paired MoE
# gate/up, the MoE down (mmv_q4_k), the output head (mmv_q6_k), the router top-k and the
# add + norm: the first 30 launches of each (the prompt's prefill, then decode steps, in order).
#   HERE first: scripts/gpu/pack.sh     GPU host: scripts/gpu/ncu-decode-kernels.sh (carry .carry/bin)
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T="$TALLY_NOPEER"
M=${M:-/tmp/l4.gguf}
K=/tmp/k; mkdir -p "$K"
[ -f "$M" ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --out "$M" > /dev/null 2>&1
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
gen=("$T" generate --model "$M" --tokenizer crates/text/tests/data/tiny.gguf --backend cuda
     --prompt "The quick brown fox jumps over the lazy dog" -n 2 --temp 0 --ignore-eos)
# The first 30 launches of each kernel (prompt prefill, then decode steps; IDs give the order).
for k in gemv_q4_k mmv_q4_k mmv_q6_k router_topk add_rms_norm; do
  ncu --clock-control none --cache-control none --kernel-name "$k" --launch-count 30 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section LaunchStats --csv --page details "${gen[@]}" > "$K/$k.csv" 2> "$K/$k.err"
  echo "$k rc=$?"
done
python3 - "$K" <<'PY'
import csv, glob, os, sys
want = ("Duration", "Memory Throughput", "DRAM Throughput", "Achieved Occupancy", "Registers Per Thread",
        "Block Size", "Grid Size", "Warp Cycles Per Issued Instruction", "L1/TEX Hit Rate", "Mem Busy",
        "Max Bandwidth", "Compute (SM) Throughput")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    rows = [r for r in csv.DictReader(l for l in open(f) if not l.startswith("=="))]
    by = {}
    for r in rows:
        by.setdefault(r.get("ID"), {})[r.get("Metric Name")] = (r.get("Metric Value"), r.get("Metric Unit"))
    for i, m in by.items():
        print(os.path.basename(f)[:-4], i, "; ".join(f"{k}={m[k][0]}{m[k][1] or ''}" for k in want if k in m))
PY
tar -C /tmp -czf "$OUT/ncu-kernels.tgz" k
