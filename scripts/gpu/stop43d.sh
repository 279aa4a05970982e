#!/usr/bin/env bash
# 2026-12-06, stop 43, call 4 (.carry/s43a.tar.xz): call 3 found the engine's gated g32 at pp512
# linear in its layer's 32-row tiles (corr 0.99 over 39 layers) and ~22% slower per tile than the
# lab's g32 on the same routing under the same ncu settings. One difference: the engine's expert
# weights lie in a 20 GB file, the lab's in ~160 MB of copies (address translation). Test: the
# same per-launch ncu on the 4-layer file (the 35B shapes, 2 GB), per tile of its own routing.
# Prediction (written before): if translation is the cause, the 4-layer file's us per tile falls
# toward the lab's (~0.87 us a tile against ~1.06 on the 40-layer file); if not, it stays.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s43d s43a
L4=/tmp/l4-pool.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --set n_layers=4 --out "$L4" > "$OUT/synth.log" 2>&1
"$N" run --model "$L4" --backend cuda --tokens 512 --routing -o json > "$OUT/run-routing-l4.json" 2> "$OUT/run-routing-l4.err"
row "l4 routing" "rc=$? ($(el))"
ncu_prefill "$L4" 512 "$N"
pack
printf '%s\n' "${summary[@]}"
python3 - "$OUT" <<'PY'
import csv, gzip, json, sys
o = sys.argv[1]
rows = [r for r in csv.reader(l for l in gzip.open(o + "/ncu-pp512.csv.gz", "rt") if not l.startswith("=="))]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
g = [float(r[vi].replace(",", "")) / 1000 for r in rows[1:] if r[ki] == "gemm_q4_k_g32"]
t = [l["tiles32"] for l in json.load(open(o + "/run-routing-l4.json"))["routing"]["layers"]]
for us, tiles in zip(g, t):
    print(f"g32 {us:.1f} us, {tiles} tiles, {us / tiles:.3f} us a tile")
PY
