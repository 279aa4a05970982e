#!/usr/bin/env bash
# The decode FFN's side-by-side and fused launches (cuda/ops/fused.rs: routed + shared gate/up on
# one gemv_multi, routed + shared down on one mmv_multi, the combine inside the gated add + norm)
# and the router's top-k by warp reductions (router.cu; issue 13): one call.
#   1. prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background;
#   2. meanwhile: `tally check --backend cuda` (node by node against the CPU) on mid q4_k_m; logits
#      digests of a prefill and 6 decode steps: new fused == new TALLY_NO_FUSE=1 == the binary
#      before the change (.carry/bin/tally-base), on mid q4_k_m and the 4-layer 35B-shaped file;
#   3. the 35B file, tally alone, base then new: pp512 and tg128 (same call);
#   4. `tally bench --peer llama.cpp` side by side: pp512, pp8192, tg128.
# HERE first: scripts/gpu/pack.sh --llama (keep the previous tally-nopeer as tally-base),
# `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`. Carry .carry/bin, .carry/llama.tar.xz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/decode-fuse
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
T=$TALLY_NOPEER
BASE=$PWD/.carry/bin/tally-base
mid_l4_files
timeout 200 "$T" check --model $MID --backend cuda --tokens 1,100,700 -n 3 > "$OUT/check-mid.log" 2>&1
row "check mid q4_k_m" "rc=$? ($(( $(date +%s) - t0 )) s)"
for f in $MID $L4; do
  n=$(basename $f .gguf)
  run_json new $f
  TALLY_NO_FUSE=1 run_json nofuse $f
  run_json base $f "$BASE"
  row "logits bits new == nofuse == base, $n" "$(logits_same "$OUT" "$n" new nofuse base)"
done
wait
row "prepare" "$(tail -1 "$OUT/prepare.log" | cut -c1-60) ($(( $(date +%s) - t0 )) s)"
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
F=/tmp/q4km.gguf
for who in base new; do
  bin=$T; [ $who = base ] && bin=$BASE
  timeout 100 "$bin" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$who.json" 2> "$OUT/tg-$who.err"
  row "35B tally alone, $who" "$(bench_row "$OUT/tg-$who.json") ($(( $(date +%s) - t0 )) s)"
done
timeout $(( 590 - ($(date +%s) - t0) )) "$TALLY" bench -m $F --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1
row "side by side" "rc=$? ($(( $(date +%s) - t0 )) s)"
tar -C /tmp -czf "$REAL_OUT/decode-fuse.tgz" decode-fuse
grep -E '^\| ' "$OUT/bench-sbs.md" 2>/dev/null | tail -7
printf '%s\n' "${summary[@]}"
