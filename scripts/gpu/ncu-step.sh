#!/usr/bin/env bash
# Per-kernel device time of one decode step (ncu, clock control none) on the 4-layer 35B-shaped
# Q4_K_M file (scripts/gpu/profile-decode.sh starts with it), for a quick before/after of a
# decode kernel change against a committed step table (e.g. ../2026-12-02-h200-decode-host/ab2/
# step-d0-none.txt). Carry .carry/bin. Prints the step table.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T="$TALLY_NOPEER"
M=${M:-/tmp/l4.gguf}
mkdir -p "$OUT/p"
t0=$(date +%s)
[ -f "$M" ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --out "$M" -o json > "$OUT/p/synth.json" 2>&1
echo "synth: $(( $(date +%s) - t0 )) s"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/p/ncu-d0.csv" "$T" generate --model "$M" \
  --tokenizer crates/text/tests/data/tiny.gguf --backend cuda --prompt "The quick brown fox jumps over the lazy dog" \
  -n 4 --temp 0 --ignore-eos > "$OUT/p/ncu-d0.out" 2>&1
echo "ncu d0 rc=$? $(( $(date +%s) - t0 )) s"
python3 tools/gpu/ncu_step.py "$OUT/p/ncu-d0.csv" > "$OUT/p/step-d0.txt" 2>&1
gzip -f "$OUT/p/ncu-d0.csv"
cat "$OUT/p/step-d0.txt" | sed -n '1,80p'
