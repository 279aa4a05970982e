#!/usr/bin/env bash
# The swapped MoE tile in the engine (issue 10 item 5, issue 14), two calls on one warm machine.
#   PHASE=1: prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background, and the
#            CUDA backend against the CPU node by node on files whose MoE tiles take the swapped
#            kernel (tiny q8_0: K = 256; mid q4_k_m: its Q6_K downs; mid q8_0, mxfp4_moe, iq4_xs).
#   PHASE=2 (within 30 s of phase 1): `tally bench --peer llama.cpp` side by side at pp512,
#            pp8192 and tg128 on the 35B file of each mix in MIXES (q4_k_m: phase 1's file; the
#            others written with `tally synth --fill pool`, deleted after their run).
# HERE first: scripts/gpu/pack.sh --llama (and .carry/llama.tar.xz). Carry .carry/bin, .carry/llama.tar.xz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/moe-swap
if [ "${PHASE:-1}" = 1 ]; then
  t0=$(date +%s)
  FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
  T0=$t0 synth_checks "tiny q8_0 1 1,37,100" "mid q4_k_m 4 1,100,700" "mid q8_0 5 1,100" "mid mxfp4_moe 6 1,100" "mid iq4_xs 7 1,100"
  wait
  tail -3 "$OUT/prepare.log"
  echo "phase 1: $(( $(date +%s) - t0 )) s"
else
  [ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
  export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
  t0=$(date +%s)
  for mix in ${MIXES:-q4_k_m mxfp4_moe q8_0 iq4_xs}; do
    [ $(( $(date +%s) - t0 )) -lt ${BUDGET_S:-380} ] || { echo "$mix skipped (time)"; continue; }
    f=/tmp/mix-$mix.gguf; [ $mix = q4_k_m ] && f=/tmp/q4km.gguf
    s0=$(date +%s)
    [ -f $f ] || "$TALLY_NOPEER" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $f -o json > "$OUT/synth-$mix.json" 2>&1
    timeout 170 "$TALLY" bench -m $f --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
      --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2>&1; echo "$mix bench rc=$? $(( $(date +%s) - s0 )) s"
    grep -E '^\| ' "$OUT/bench-$mix.md" | tail -7
    [ $mix = q4_k_m ] || rm -f $f
  done
  echo "phase 2: $(( $(date +%s) - t0 )) s"
fi
tar -C /tmp -czf "$REAL_OUT/moe-swap-${PHASE:-1}.tgz" moe-swap
