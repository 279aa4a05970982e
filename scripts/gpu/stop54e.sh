#!/usr/bin/env bash
# 2026-12-07, stop 54, call 5: the committed form of call 3's changes (the multi-token delta
# prologue in its own kernel, delta_rule_step_pro, and the router's rows in router_fused_rows,
# so the one-token kernels are as before: delta_rule_step's machine code is e7551f9's but for a
# helper's name). Carry .carry/s54e.tar.xz (bin/tally this stop's, bin/tally-base e7551f9).
#   1. logits digests (37-token prompt, 6 decode steps) of mid q4_k_m and the 4-layer 35B file:
#      base with the two new defaults switched on against new (must be the same: nothing of a
#      prompt over 16 tokens or of a one-token step changed); `tally check` of mid at 4 tokens;
#   2. tg128 (after a 512-token prompt) base / new alternated twice (call 4: -0.4%);
#   3. spec k = 3 at replayed acceptance 0.8, new, twice (call 3: 1.42x / 1.43x).
# Prediction: (1) the same; (2) within +-0.3%; (3) 1.42-1.43x.
set -u
LIMIT=${LIMIT:-300}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s54e s54e
mid_l4_files
for f in "$MID" "$L4"; do
    n=$(basename "$f" .gguf)
    TALLY_DELTA_PREP=prologue TALLY_NORM_CAST=on run_json base "$f" "$B"
    run_json new "$f" "$N"
    row "digests $n 37+6" "$(logits_same "$OUT" "$n" base new) ($(el))"
done
timeout 120 "$N" check --model $MID --backend cuda --tokens 4 -n 3 > "$OUT/check-mid-4.log" 2>&1
row "check mid 4 tokens" "rc=$? ($(el))"
pack
# With little device time left (STOP54E_SHORT=1): tg128 of the 4-layer file only.
if [ -n "${STOP54E_SHORT:-}" ]; then
    ab tg "$L4" -p 512 -n 128
    printf '%s\n' "${summary[@]}"
    exit 0
fi
SYNTH_MTP=1 synth_35b q4_k_m
ab tg "$F" -p 512 -n 128
for round in 1 2; do
    timeout 150 "$N" bench -m "$F" --backend cuda -p 512 -n 100 -r 3 --spec mtp --draft-max 3 \
        --replay-acceptance 0.8 -o md > "$OUT/spec-new-$round.md" 2> "$OUT/spec-new-$round.err"
    row "spec new $round" "rc=$? $(grep -o '[0-9.]* t/s vs [0-9.]* t/s plain greedy in the same windows: [0-9.]*x; per window verify [0-9.]* s' "$OUT/spec-new-$round.md" | head -1) ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
