#!/usr/bin/env bash
# GPU call 3 of 3 (2026-12-02; issue 10 item 5): speed on every mix. For each of q5_k_m, q8_0,
# iq4_xs and mxfp4_moe (q4_k_m is call 2's file): the 35B-A3B synth file with pooled blocks
# (`tally synth --fill pool`: real quantised blocks drawn at random; the router and f32 tensors
# exact; no kernel's speed depends on the values), then `tally bench --peer llama.cpp` at pp512
# and pp8192 side by side, and tg128. Each file is deleted before the next (disk). Needs the
# llama.cpp build of pdl.sh / prepare.sh on the same warm machine.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
REAL_OUT=$OUT
export OUT=/tmp/o3; mkdir -p $OUT
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
t0=$(date +%s)
rm -f /tmp/l4.gguf
for mix in ${MIXES:-q8_0 q5_k_m iq4_xs mxfp4_moe}; do
  [ $(( $(date +%s) - t0 )) -lt 450 ] || { echo "$mix skipped (time)"; continue; }
  f=/tmp/mix-$mix.gguf
  s0=$(date +%s)
  "$TALLY_NOPEER" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $f -o json > "$OUT/synth-$mix.json" 2>&1
  echo "$mix synth rc=$? $(( $(date +%s) - s0 )) s, $(du -h $f | cut -f1)"
  timeout 150 "$TALLY" bench -m $f --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
    --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2>&1; echo "$mix bench rc=$? $(( $(date +%s) - s0 )) s"
  grep -E '^\| ' "$OUT/bench-$mix.md" | tail -7
  rm -f $f
done
echo "mixes: $(( $(date +%s) - t0 )) s"
tar czf "$REAL_OUT/mixes.tgz" -C /tmp o3
