#!/usr/bin/env bash
# Decode GEMV occupancy (issue 13): the launch bounds of gemv_<t>, gemv4_<t>, gemv_multi_<t> and
# mmv_<t> at 2 blocks per multiprocessor (the default: 109-128 registers for the Q4_K_M kernels)
# against 3 (80 registers; some types spill, see docs/cuda.md), set by TALLY_GEMV_BLOCKS=G,G4,M,V.
# Hypothesis (stop 19's note): wave quantisation, 2 blocks a multiprocessor leave the routed
# gate/up's 512 blocks and the 516-block in-projection in two waves.
#   tally alone on the 35B-A3B Q4_K_M (pool fill): pp512 + tg128 per setting, then the first two
#   settings again in the opposite order (drift); logits digests of the 4-layer file per setting
#   (launch bounds change registers, never the arithmetic: the bits must be the same).
# HERE first: cargo build --release -p tally; copy to .carry/bin/tally-nopeer. Carry .carry/bin.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/gemv-blocks
t0=$(date +%s)
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
L4=/tmp/l4.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
[ -f $L4 ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out $L4 >> "$OUT/synth.log" 2>&1
echo "synth: $(( $(date +%s) - t0 )) s"
settings=(${SETTINGS:-2,2,2,2 3,3,3,3 3,2,2,3 3,3,2,3})
i=0
for s in "${settings[@]}" "${settings[1]}" "${settings[0]}"; do
  i=$((i + 1))
  tag=$(echo "$s" | tr -d ,)
  [ -f "$OUT/run-l4-$tag.json" ] || TALLY_GEMV_BLOCKS=$s timeout 150 "$T" run --model $L4 --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-l4-$tag.json" 2> "$OUT/run-l4-$tag.err"
  TALLY_GEMV_BLOCKS=$s timeout 120 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$i-$tag.json" 2> "$OUT/tg-$i-$tag.err"
  echo "$i blocks=$s: $(bench_row "$OUT/tg-$i-$tag.json") ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
  tar -C /tmp -czf "$REAL_OUT/gemv-blocks.tgz" gemv-blocks
done
tags=$(for s in "${settings[@]}"; do echo "$s" | tr -d ,; done)
echo "logits bits, every setting: $(logits_same "$OUT" l4 $tags)" | tee -a "$OUT/summary.txt"
tar -C /tmp -czf "$REAL_OUT/gemv-blocks.tgz" gemv-blocks
cat "$OUT/summary.txt"
