#!/usr/bin/env bash
# 2026-12-07, stop 50: decode A/B of two bit-identical load-order changes (issue 13). Carry
# .carry/s50c.tar.xz (bin/tally-base: 35091e4, bin/tally: the change, both without the peer;
# kcache holding both builds' kernels). Result: both slower, not kept; the change is
# docs/results/2026-12-07-stop50/call3/change-not-kept.patch (apply it to 35091e4 to rebuild).
#   - gemv_int_body (the integer decode GEMV: the in-projections, the routed and shared gate/up,
#     the out-projections): two pieces a lane in flight, all of a lane's loads out before x is
#     quantised at K <= 2,048 (was: the second piece issued after the first's sums);
#   - conv_silu: a tile's first 8 x rows loaded before the state's stores (was: after them).
# ncu (stop 50, H100, one decode step of the 4-layer file, kernels serialised, caches kept):
# in-projection gemv_multi 16.5 us (14.2 MB, 860 GB/s), gate/up 14.3 us, conv_silu 8.4 us.
# Prediction: those ~25% faster under ncu; tg128 +2-4% (30 linear-attention layers x ~1 us
# for conv and 40 x 2-3 us for the GEMVs in graph, of 3.0 ms); the same bits.
#   1. logits digests of the 4-layer file (37-token prefill + 6 steps), base / new: the same;
#   2. tally check of the mid file (node by node against the CPU), new;
#   3. ncu of one decode step of the 4-layer file, new (base: stop 50 call 2);
#   4. 35B-A3B Q4_K_M: pp512 + tg128, base / new alternated twice.
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s50c s50c
mid_l4_files
for v in base new; do
    bin=$N; [ $v = base ] && bin=$B
    run_json "$v" "$L4" "$bin"
done
row "digests l4 base/new" "$(logits_same "$OUT" l4 base new) ($(el))"
timeout 200 "$N" check --model "$MID" --backend cuda --tokens 300 -n 3 > "$OUT/check-mid.log" 2>&1
row "check mid 300 tokens, new" "rc=$? ($(el))"
ncu_step base "$L4" "$B"
ncu_step new "$L4" "$N"
pack
synth_35b q4_k_m
ab tg "$F" -p 512 -n 128
pack
printf '%s\n' "${summary[@]}"
sed -n '/^kernel/,/^$/p' "$OUT/step-new.txt" | head -14
