#!/usr/bin/env bash
# Issue 13: speculative decoding with per-token states (conv_silu and delta_rule_step keep the
# state after each token of a 2..=k+1-token verification; a rejection copies back the state
# after the last kept token instead of restoring and recomputing). The bench's own check holds
# the tokens to plain greedy decoding's (it stops with an error at the first difference).
# Checks: `tally check --backend cuda` on mid q4_k_m at 64 tokens; the 35B-A3B Q4_K_M synth file
# with its MTP block: tg128, speculative k = 1/2/3 at replayed acceptance 0.8, k = 3 at 0.5 and
# 0.9, and k = 3 with the file's own (random, never right) draft head: every step rolls back to
# token 0. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch
# sm_90a. Carry .carry/bin, .carry/kcache. Everything in $OUT/s.tgz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job s
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 64 -n 3 > "$OUT/check-mid-64.log" 2>&1
row "check mid q4_k_m tokens=64" "rc=$? ($(el))"
for f in $MID $L4; do run_json new $f; done
wait $SYNTH
row synth "$(el)"
spec() {  # NAME K [ACCEPTANCE]
    local extra=(); [ -n "${3:-}" ] && extra=(--replay-acceptance "$3")
    timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max "$2" "${extra[@]}" \
        -o md > "$OUT/spec-$1.md" 2> "$OUT/spec-$1.err"
    local rc=$?
    row "spec $1" "rc=$rc $(grep -oE 'spec k=[0-9] \| +[0-9.]+ ± [0-9.]+' "$OUT/spec-$1.md" | tr -s ' ') $(grep -oE '[0-9.]+x; per window.*' "$OUT/spec-$1.md") $(grep -iE 'diverged|error' "$OUT/spec-$1.err" "$OUT/spec-$1.md" | head -2 | tr '\n' ' ') ($(el))"
    pack
}
spec k3-a0.8 3 0.8
spec k1-a0.8 1 0.8
spec k2-a0.8 2 0.8
spec k3-a0.5 3 0.5
spec k3-a0.9 3 0.9
spec k3-head 3
timeout 150 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg.json" 2> "$OUT/tg.err"
row "tg128" "rc=$? $(bench_row "$OUT/tg.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
