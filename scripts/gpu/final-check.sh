#!/usr/bin/env bash
# A short check of the committed kernels on the GPU: `tally check --backend cuda` on mid q4_k_m at
# 1,000 tokens (the wgmma MoE tile) and 64 tokens (the swapped and m32 tiles), and that a run
# with every kernel cached prints no compile note. Carry .carry/bin and .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/kcache ] && cp -r .carry/kcache /tmp/tally-cache && export TALLY_CACHE=/tmp/tally-cache
T=$TALLY_NOPEER
"$T" synth --preset mid --quant q4_k_m --seed 4 --out /tmp/mid.gguf > /dev/null 2>&1
for n in 1000 64; do
    timeout 100 "$T" check --model /tmp/mid.gguf --backend cuda --tokens $n -n 2 > "$OUT/check-mid-$n.log" 2>&1
    echo "check mid q4_k_m tokens=$n rc=$?"
done
"$T" run --model /tmp/mid.gguf --backend cuda --tokens 8 -n 2 > "$OUT/run.log" 2> "$OUT/run.err"
echo "run rc=$? compile notes: $(grep -c 'note: compiling' "$OUT/run.err")"
