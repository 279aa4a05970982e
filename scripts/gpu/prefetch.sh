#!/usr/bin/env bash
# The GEMV weight prefetch (common.cuh l2_prefetch, pdl_enter_prefetch; issue 13): one call.
#   1. prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background;
#   2. meanwhile, on the small files: `tally check --backend cuda` (node by node against the CPU)
#      with the prefetch on and off (TALLY_PREFETCH=off compiles it away: both kernel builds), and
#      logits digests of a prefill and 6 decode steps, on == off (a prefetch changes no bit), on
#      mid q4_k_m and the 4-layer 35B-shaped file;
#   3. the 35B file, tally alone: tg128 with the prefetch off, then on (same binary, same call);
#   4. `tally bench --peer llama.cpp` side by side: pp512, pp8192, tg128 (prefetch on).
# HERE first: scripts/gpu/pack.sh --llama. Carry .carry/bin, .carry/llama.cpp. Summary last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/prefetch
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
T=$TALLY_NOPEER
mid_l4_files
for pf in on off; do
  TALLY_PREFETCH=$pf timeout 200 "$T" check --model $MID --backend cuda --tokens 1,100,700 -n 3 > "$OUT/check-mid-$pf.log" 2>&1
  row "check mid q4_k_m, prefetch $pf" "rc=$? ($(( $(date +%s) - t0 )) s)"
done
for f in $MID $L4; do
  n=$(basename $f .gguf)
  for pf in on off; do
    TALLY_PREFETCH=$pf run_json $pf $f
  done
  row "logits bits on == off, $n" "$(logits_same "$OUT" "$n" on off)"
done
wait
row "prepare" "$(tail -1 "$OUT/prepare.log" | cut -c1-60) ($(( $(date +%s) - t0 )) s)"
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
F=/tmp/q4km.gguf
for pf in off on; do
  TALLY_PREFETCH=$pf timeout 100 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$pf.json" 2> "$OUT/tg-$pf.err"
  row "35B tally alone, prefetch $pf" "$(bench_row "$OUT/tg-$pf.json") ($(( $(date +%s) - t0 )) s)"
done
[ $(( $(date +%s) - t0 )) -lt 430 ] && {
  timeout 170 "$TALLY" bench -m $F --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
    --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1; row "side by side" "rc=$? ($(( $(date +%s) - t0 )) s)"
}
tar -C /tmp -czf "$REAL_OUT/prefetch.tgz" prefetch
grep -E '^\| ' "$OUT/bench-sbs.md" 2>/dev/null | tail -7
printf '%s\n' "${summary[@]}"
