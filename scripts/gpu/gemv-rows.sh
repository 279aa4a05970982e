#!/usr/bin/env bash
# A dense GEMV of a few rows with every row in each block (grid.y = 1, TALLY_GEMV_ROWS=block, the
# default) against one block per row (TALLY_GEMV_ROWS=grid), issue 13's verification step:
#   1. logits digests of a 5-token prefill (the GEMV path: M <= 8) and 3 decode steps on the
#      4-layer 35B-shaped file, block == grid (the same per-row code: the bits must agree);
#   2. speculative decoding, k = 3, replayed drafts at acceptance 0.8, on the 35B-A3B Q4_K_M
#      file with its MTP block: grid, then block (same binary).
# HERE first: cargo build --release -p tally; copy to .carry/bin/tally-nopeer. Carry .carry/bin.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
t0=$(date +%s)
T=$TALLY_NOPEER
L4=/tmp/l4.gguf
F=/tmp/q4km-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out $L4 > /dev/null 2>&1
for r in block grid; do
  TALLY_GEMV_ROWS=$r timeout 100 "$T" run --model $L4 --backend cuda --tokens 5 -n 3 -o json > "$OUT/run-l4-$r.json" 2> "$OUT/run-l4-$r.err"
  echo "run l4 $r rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
o = sys.argv[1]
try:
    a, b = (json.load(open(f"{o}/run-l4-{r}.json"))["logits_digests"] for r in ("block", "grid"))
    print("logits bits block == grid:", "same" if a == b and len(a) == 4 else f"DIFFER {a} {b}")
except Exception as e:
    print("logits bits: ERROR", e)
PY
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > /dev/null 2>&1
echo "synth: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
for r in grid block; do
  TALLY_GEMV_ROWS=$r timeout 100 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance 0.8 -o md > "$OUT/spec-$r.md" 2> "$OUT/spec-$r.err"
  echo "spec k3 a0.8 $r rc=$? $(grep '^speculative' "$OUT/spec-$r.md" | cut -c1-330) ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
done
