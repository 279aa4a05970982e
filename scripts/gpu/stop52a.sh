#!/usr/bin/env bash
# 2026-12-07, stop 52: the decode router on router_fused (router.cu: the f32 GEMV with every
# block's weight loads in flight, and router_topk8's top-k in the block that finishes last; one
# launch where gemv_f32 + router_topk8 were two). Carry .carry/bin (tally-nopeer: this commit)
# (and tally-base: bddefed, the router change without the conv one) and .carry/kcache (both
# binaries came as .carry/s52.tar.xz, unpacked into .carry before the script). The conv change
# measured here (5218117) lost 3.6% of tg128 and was reverted (93c57e2).
# TALLY_ROUTER_FUSE=off is the router's base (gemv_f32 + router_topk8). Also the one-token conv
# (conv.cu: the tile's first 4 rows of x loaded with the state window, one memory round trip
# for a decode step where there were three; the same bits): base = tally-base with the router
# off (stop 51's kernels), new = tally-nopeer (both changes), arm3 = tally-nopeer with the
# router off (the conv change alone).
# Why (stop 51's ncu of a decode step): gemv_f32 6.0 us a layer at 3% achieved occupancy (64
# blocks of 64 threads, each warp 2 rows x 16 dependent 16-byte pieces a lane) and
# router_topk8 4.3 us (one warp): 10.3 of ~81 us a delta layer, serialised.
# Prediction (written before): router_fused 3-4 us a layer under ncu; tg128 +5-8% on 35B
# Q4_K_M (H100: 365 -> 385-395) from the router, conv_silu 8.6 -> ~5 us a layer and +2-3% more;
# pp512/pp8192 within noise (conv_silu 112 registers instead of 88: 4 blocks a multiprocessor
# in prefill, not 5); digests: fused = unfused (TALLY_NO_FUSE=1) bit for bit, router off / on
# differ (another summation order of the logits), conv old / new the same; tally check passes.
#   1. digests of the 4-layer and mid files: off / on / on unfused;
#   2. tally check of the mid file in q4_k_m, q8_0, iq4_xs, mxfp4_moe; the converter fixtures;
#   3. ncu of one decode step of the 4-layer file, off / on;
#   4. 35B-A3B Q4_K_M: pp512, pp8192, tg128 base / new / arm3 alternated twice.
set -u
LIMIT=${LIMIT:-480}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
N=$PWD/.carry/bin/tally-nopeer
B=/tmp/tally-base
printf '#!/bin/sh\nTALLY_ROUTER_FUSE=off exec %s "$@"\n' "$PWD/.carry/bin/tally-base" > $B
R=/tmp/tally-router-off
printf '#!/bin/sh\nTALLY_ROUTER_FUSE=off exec %s "$@"\n' "$N" > $R
chmod +x $B $R
export TALLY=$N TALLY_NOPEER=$N
gpu_job s52a
gpu_and_dir
mid_l4_files
for f in "$L4" "$MID"; do
    run_json base "$f" "$B"
    run_json routeroff "$f" "$R"
    run_json new "$f" "$N"
    TALLY_NO_FUSE=1 run_json unfused "$f" "$N"
    n=$(basename "$f" .gguf)
    row "digests $n on/unfused (same)" "$(logits_same "$OUT" "$n" new unfused) ($(el))"
    row "digests $n router off/on (differ)" "$(logits_same "$OUT" "$n" routeroff new)"
    row "digests $n conv old/new (same)" "$(logits_same "$OUT" "$n" base routeroff)"
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
ARM3="TALLY_ROUTER_FUSE=off" AB_UNTIL=$LIMIT ab q4_k_m "$F" -p 512,8192 -n 128
pack
printf '%s\n' "${summary[@]}"
for v in off on; do sed -n '/^kernel/,/^$/p' "$OUT/step-$v.txt" | head -14; done
