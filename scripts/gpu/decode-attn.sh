#!/usr/bin/env bash
# Flash decoding's scores summed with warp_sum32 (attention.cu decode; issue 13's depth rows): one
# call.
#   1. prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background;
#   2. lab/attention, the base build and the new one: timing of the model's shapes (tg@64,
#      tg@8192, tg@32768 are the decode kernel), then the new build's full correctness matrix;
#   3. `tally check --backend cuda` on mid q4_k_m, and logits digests of a prefill and 6 decode
#      steps, new == base binary (warp_sum32 adds the pairs warp_sum adds: no bit may change), on
#      mid q4_k_m and the 4-layer 35B-shaped file;
#   4. `tally bench --peer llama.cpp`: pp512, tg128 at depth 0, 8192 and 32768.
# HERE first: scripts/gpu/pack.sh --llama, .carry/bin/tally-base (the binary before the change),
# .carry/lab/attn_bench and attn_bench_base (lab/attention/README.md; the base tree with this
# lab/attention/bench.cu). Carry .carry/bin, .carry/lab, .carry/llama.cpp. Summary last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/decode-attn
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
for b in attn_bench_base attn_bench; do
  timeout 120 .carry/lab/$b --timing-only > "$OUT/lab-$b-timing.txt" 2>&1
  row "lab $b timing" "rc=$? ($(( $(date +%s) - t0 )) s)"
done
timeout 150 .carry/lab/attn_bench --checks-only > "$OUT/lab-checks.txt" 2>&1
row "lab attn_bench checks" "rc=$? $(tail -1 "$OUT/lab-checks.txt" | cut -c1-60)"
T=$TALLY_NOPEER
BASE=$PWD/.carry/bin/tally-base
mid_l4_files
timeout 200 "$T" check --model $MID --backend cuda --tokens 1,100,700 -n 3 > "$OUT/check-mid.log" 2>&1
row "check mid q4_k_m" "rc=$? ($(( $(date +%s) - t0 )) s)"
for f in $MID $L4; do
  n=$(basename $f .gguf)
  run_json new $f
  run_json base $f "$BASE"
  row "logits bits new == base, $n" "$(logits_same "$OUT" "$n" new base)"
done
wait
row "prepare" "$(tail -1 "$OUT/prepare.log" | cut -c1-60) ($(( $(date +%s) - t0 )) s)"
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
timeout $(( 590 - ($(date +%s) - t0) )) "$TALLY" bench -m /tmp/q4km.gguf --backend cuda --peer llama.cpp -p 512 -n 128 \
  -d 0,8192,32768 -r 3 --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1
row "side by side" "rc=$? ($(( $(date +%s) - t0 )) s)"
tar -C /tmp -czf "$REAL_OUT/decode-attn.tgz" decode-attn
for b in attn_bench_base attn_bench; do echo "-- $b"; grep -E '^tg@' "$OUT/lab-$b-timing.txt"; done
grep -E '^\| ' "$OUT/bench-sbs.md" 2>/dev/null | tail -9
printf '%s\n' "${summary[@]}"
