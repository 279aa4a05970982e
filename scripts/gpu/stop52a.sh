#!/usr/bin/env bash
# 2026-12-07, stop 52: the decode router on router_fused (router.cu: the f32 GEMV with every
# block's weight loads in flight, and router_topk8's top-k in the block that finishes last; one
# launch where gemv_f32 + router_topk8 were two). Carry .carry/bin (tally-nopeer: this commit)
# and .carry/kcache. TALLY_ROUTER_FUSE=off is the base (gemv_f32 + router_topk8), the same
# binary with the default the change.
# Why (stop 51's ncu of a decode step): gemv_f32 6.0 us a layer at 3% achieved occupancy (64
# blocks of 64 threads, each warp 2 rows x 16 dependent 16-byte pieces a lane) and
# router_topk8 4.3 us (one warp): 10.3 of ~81 us a delta layer, serialised.
# Prediction (written before): router_fused 3-4 us a layer under ncu; tg128 +5-8% on 35B
# Q4_K_M (H100: 365 -> 385-395); digests: fused = unfused (TALLY_NO_FUSE=1) bit for bit, off /
# on differ (another summation order of the logits); tally check passes (CUDA vs CPU).
#   1. digests of the 4-layer and mid files: off / on / on unfused;
#   2. tally check of the mid file in q4_k_m, q8_0, iq4_xs, mxfp4_moe; the converter fixtures;
#   3. ncu of one decode step of the 4-layer file, off / on;
#   4. 35B-A3B Q4_K_M: tg128 (pp512 beside) off / on alternated twice.
set -u
LIMIT=${LIMIT:-480}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
N=$PWD/.carry/bin/tally-nopeer
B=/tmp/tally-router-off
printf '#!/bin/sh\nTALLY_ROUTER_FUSE=off exec %s "$@"\n' "$N" > $B
chmod +x $B
export TALLY=$N TALLY_NOPEER=$N
gpu_job s52a
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp
[ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
mid_l4_files
for f in "$L4" "$MID"; do
    run_json base "$f" "$B"
    run_json new "$f" "$N"
    TALLY_NO_FUSE=1 run_json unfused "$f" "$N"
    n=$(basename "$f" .gguf)
    row "digests $n on/unfused (same)" "$(logits_same "$OUT" "$n" new unfused) ($(el))"
    row "digests $n off/on (differ)" "$(logits_same "$OUT" "$n" base new)"
done
while read -r l; do row "$l" ""; done < <(T0=$t0 synth_checks "mid q4_k_m 4 300" "mid q8_0 4 300" "mid iq4_xs 4 300" "mid mxfp4_moe 4 300")
for f in "$OUT"/check_*.log; do row "$(basename "$f")" "$(tail -1 "$f" | cut -c1-90)"; done
mkdir -p "$OUT/conv"
OUT=$OUT/conv timeout 200 scripts/gpu/converter.sh > "$OUT/conv.txt" 2>&1
row "converter fixtures" "rc=$? $(grep -c 'ok (expected to pass)' "$OUT/conv.txt") passed, $(grep -c 'as expected (' "$OUT/conv.txt") at the kernel limit ($(el))"
pack
ncu_step off "$L4" "$B"
ncu_step on "$L4" "$N"
pack
synth_35b q4_k_m
AB_UNTIL=$LIMIT ab tg-q4_k_m "$F" -p 512 -n 128
pack
printf '%s\n' "${summary[@]}"
for v in off on; do sed -n '/^kernel/,/^$/p' "$OUT/step-$v.txt" | head -14; done
