#!/usr/bin/env bash
# Issue 13: gemvr4_<t> only for the verification batch's projections of N >= 8192 (the output
# head), the shorter ones back on gemv_<t> with a block per row (as before 41a9e5e). One-token
# steps are unchanged. (scripts/gpu/verify-unfused.sh measured the opposite move: slower.)
# The A/B against the binary before (.carry/bin/tally-old; the same kernels, one cache): logits
# digests of plain runs (must not change), then speculative k = 3 and k = 1 at replayed
# acceptance 0.8 on the 35B-A3B Q4_K_M synth file with MTP, ABAB (the bench stops at the first
# token that differs from plain greedy). HERE first: build the previous commit into
# .carry/bin/tally-old; scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch
# sm_90a. Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job v
T=$TALLY_NOPEER
OLD=.carry/bin/tally-old
F=/tmp/q4km-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
for f in $MID $L4; do
    run_json new $f
    run_json old $f $OLD
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename $f .gguf)" new old) ($(el))"
done
wait $SYNTH
row synth "$(el)"
for v in old new; do
    b=$T; [ $v = old ] && b=$OLD
    for k in 3 1; do
        timeout 150 "$b" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max $k --replay-acceptance 0.8 \
            -o md > "$OUT/spec-k$k-$v-$(date +%s).md" 2> "$OUT/spec-k$k-$v.err"
        row "spec k=$k $v" "rc=$? $(grep -ohE '[0-9.]+ t/s vs [0-9.]+ t/s plain greedy in the same windows: [0-9.]+x; per window verify [0-9.]+ s' $(ls -t "$OUT"/spec-k$k-$v-*.md | head -1)) ($(el))"
        pack
    done
done
printf '%s\n' "${summary[@]}"
