#!/usr/bin/env bash
# The delta step's fused prologue (issue 13; cuda/ops/fused.rs, delta.cu): at one token the
# delta gates, the q and k L2 norms and the delta rule's step go out as one delta_rule_step
# launch (two launches fewer per linear-attention layer, one a single block). One call:
#   1. prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background;
#   2. meanwhile: `tally check --backend cuda` on mid q4_k_m (node by node against the CPU);
#      logits digests of a prefill and 6 decode steps, fused == TALLY_NO_FUSE=delta ==
#      TALLY_NO_FUSE=1, on mid q4_k_m and the 4-layer 35B-shaped file;
#   3. the 35B file, tally alone: tg128 with and without the prologue, ABAB (same binary);
#   4. `tally bench --peer llama.cpp` side by side: pp512, pp8192, tg128.
# HERE first: scripts/gpu/pack.sh --llama; `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`.
# Carry .carry/bin, .carry/llama.tar.xz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/delta-prologue
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
T=$TALLY_NOPEER
mid_l4_files
timeout 200 "$T" check --model $MID --backend cuda --tokens 1,100,700 -n 3 > "$OUT/check-mid.log" 2>&1
row "check mid q4_k_m" "rc=$? ($(( $(date +%s) - t0 )) s)"
for f in $MID $L4; do
  n=$(basename $f .gguf)
  run_json new $f
  TALLY_NO_FUSE=delta run_json nodelta $f
  TALLY_NO_FUSE=1 run_json nofuse $f
  row "logits bits new == nodelta == nofuse, $n" "$(logits_same "$OUT" "$n" new nodelta nofuse)"
done
wait
row "prepare" "$(tail -1 "$OUT/prepare.log" | cut -c1-60) ($(( $(date +%s) - t0 )) s)"
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
F=/tmp/q4km.gguf
for who in nodelta new nodelta new; do
  nf=; [ $who = nodelta ] && nf=delta
  TALLY_NO_FUSE=$nf timeout 100 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$who.json" 2> "$OUT/tg-$who.err"
  row "35B tally alone, $who" "$(bench_row "$OUT/tg-$who.json") ($(( $(date +%s) - t0 )) s)"
done
tar -C /tmp -czf "$REAL_OUT/delta-prologue.tgz" delta-prologue
timeout $(( 585 - ($(date +%s) - t0) )) "$TALLY" bench -m $F --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1
row "side by side" "rc=$? ($(( $(date +%s) - t0 )) s)"
tar -C /tmp -czf "$REAL_OUT/delta-prologue.tgz" delta-prologue
grep -E '^\| ' "$OUT/bench-sbs.md" 2>/dev/null | tail -7
printf '%s\n' "${summary[@]}"
