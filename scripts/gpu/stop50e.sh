#!/usr/bin/env bash
# 2026-12-07, stop 50: TALLY_GEMV_WAVE=one against off (issue 13), one binary. Carry
# .carry/s50e.tar.xz (bin/tally without the peer, kcache). Result: no gain, not kept; the change
# is docs/results/2026-12-07-stop50/call7/gemv-wave-not-kept.patch (on 1bb24c6).
# ncu (call 4's sections, H100): gemv_multi_q4_k has 109 registers, so 2 blocks of 256 threads a
# multiprocessor (25% occupancy); the linear-attention in-projections' 516 blocks are 1.95
# waves, and the kernel takes 13.6 us with its weights in L2 (16.5 us from DRAM): not bound by
# DRAM. With `one`, that launch gets 264 blocks (one wave), each walking two row groups with x
# quantised once.
# Prediction: in-projections 16.5 -> ~11.5 us under ncu, tg128 +2-4% (30 layers x ~4 us of
# 3.0 ms); the same bits.
#   1. logits digests of the 4-layer file, off / one: the same;
#   2. ncu of one decode step of the 4-layer file, one (NCU_ARMS="off one" for both; off's
#      kernels are 35091e4's but for the loop: call 3's step-base.txt);
#   3. 35B-A3B Q4_K_M: pp512 + tg128, off / one alternated twice.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s50e s50e
mid_l4_files
for v in off one; do TALLY_GEMV_WAVE=$v run_json "$v" "$L4"; done
row "digests l4 off/one" "$(logits_same "$OUT" l4 off one) ($(el))"
for v in ${NCU_ARMS:-one}; do TALLY_GEMV_WAVE=$v ncu_step "$v" "$L4" "$N"; done
pack
synth_35b q4_k_m
for round in 1 2; do
    for v in off one; do
        TALLY_GEMV_WAVE=$v timeout 100 "$N" bench -m "$F" --backend cuda -p 512 -n 128 -r 3 -o json \
            > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg $v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
    done
done
pack
printf '%s\n' "${summary[@]}"
sed -n '/in launch order/,$p' "$OUT/step-one.txt" | head -16
