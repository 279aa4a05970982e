#!/usr/bin/env bash
# Speculative decoding with the MTP block on the current binary (issue 13, item 3): the 35B-A3B
# Q4_K_M synth file with its MTP block (`synth --mtp`, the converter's layout; pool fill), tally alone.
#   replayed drafts (a recorded greedy continuation corrupted to a target acceptance):
#   k = 3 at acceptance 0.5, 0.7, 0.8, 0.9; k = 1, 2, 4 at 0.8; then the file's own draft head
#   (random weights: its acceptance is expected near zero). Each row reports tok/s against plain
#   greedy in the same windows and the time per part (verify, save, restore + recompute).
# HERE first: cargo build --release -p tally; copy to .carry/bin/tally-nopeer. Carry .carry/bin.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/spec
t0=$(date +%s)
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1
echo "synth: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
spec() {  # NAME K [ACCEPTANCE]; ROWS="name ..." runs only those
  [ -n "${ROWS:-}" ] && [[ " $ROWS " != *" $1 "* ]] && return
  local extra=(); [ -n "${3:-}" ] && extra=(--replay-acceptance "$3")
  timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max "$2" "${extra[@]}" \
    -o md > "$OUT/$1.md" 2> "$OUT/$1.err"
  echo "$1 rc=$? $(grep '^speculative' "$OUT/$1.md" | head -1 | cut -c1-330) ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
  tar -C /tmp -czf "$REAL_OUT/spec.tgz" spec
}
spec k3-a0.8 3 0.8
spec k3-a0.9 3 0.9
spec k3-a0.7 3 0.7
spec k3-a0.5 3 0.5
spec k1-a0.8 1 0.8
spec k2-a0.8 2 0.8
spec k4-a0.8 4 0.8
spec k3-draft-head 3
cat "$OUT/summary.txt"
