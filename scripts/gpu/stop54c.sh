#!/usr/bin/env bash
# 2026-12-07, stop 54, call 3 (issues 13 and 14): main's engine before this stop (bin/tally-base,
# e7551f9's kernels; 1bf06e0 changed host code only) against this stop's (bin/tally): the delta
# prologue and the norms' f16 copy on by default (call 1 measured them), and three changes to a
# verification batch (2-16 token rows) that stop 54's call 2 profiled:
#   - its in-projections on gemvi_mr_<t> (gemv_multi's every-row body alone: 80 registers, 3
#     blocks a multiprocessor, where gemv_multi_<t> runs 2 at 109);
#   - its router on router_fused with a grid row a token (the one-token launch's bits for each
#     row; gemv_f32 + router_topk8 before);
#   - its delta gates and q/k L2 norms inside delta_rule_step (the one-token step's prologue,
#     now for T <= 16 tokens).
# Carry .carry/s54c.tar.xz (bin/tally, bin/tally-base, kcache for both).
#   1. `tally check --backend cuda` of mid q4_k_m at 4 tokens (node by node against the CPU:
#      the verification batch's shapes) with the new binary;
#   2. the 35B-A3B Q4_K_M synth file with its MTP block;
#   3. speculative k = 3 at replayed acceptance 0.8 (tg100, every token held to plain greedy's),
#      base / new alternated twice;
#   4. pp512 / pp8192, base / new alternated twice;
#   5. ncu of a spec generation with the new binary: the verification against a plain step.
# Prediction (written before): (3) the verification's device time (call 2: 6.57 ms under ncu
# against a plain step's 3.61) -0.5 to -0.7 ms (in-projections ~-0.3, router ~-0.15, delta
# prologue ~-0.15): spec k = 3 at 0.8 from ~1.33x to ~1.42x plain; plain tg unchanged;
# (4) pp512 +2-3%, pp8192 +1.5-2% (call 1's prep + cast).
set -u
LIMIT=${LIMIT:-570}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s54c s54c
MID=/tmp/mid-q4_k_m.gguf
"$N" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 120 "$N" check --model $MID --backend cuda --tokens 4 -n 3 > "$OUT/check-mid-4.log" 2>&1
row "check mid 4 tokens" "rc=$? $(grep -i -m1 'pass\|fail' "$OUT/check-mid-4.log") ($(el))"
SYNTH_MTP=1 synth_35b q4_k_m
pack
for round in 1 2; do
    for v in base new; do
        bin=$N; [ $v = base ] && bin=$B
        timeout 150 "$bin" bench -m "$F" --backend cuda -p 512 -n 100 -r 3 --spec mtp --draft-max 3 \
            --replay-acceptance 0.8 -o md > "$OUT/spec-$v-$round.md" 2> "$OUT/spec-$v-$round.err"
        row "spec $v $round" "rc=$? $(grep -o '[0-9.]* t/s vs [0-9.]* t/s plain greedy in the same windows: [0-9.]*x; per window verify [0-9.]* s' "$OUT/spec-$v-$round.md" | head -1) ($(el))"
        pack
    done
done
AB_UNTIL=$(( LIMIT - 150 )) ab pp "$F" -p 512,8192 -n 0
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
P="The quick brown fox jumps over the lazy dog"
for v in plain spec; do
    [ "$(( $(date +%s) - t0 ))" -lt $(( LIMIT - 60 )) ] || continue
    extra=(); [ $v = spec ] && extra=(--spec mtp --draft-max 3)
    timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/ncu-$v.csv" "$N" generate --model "$F" --tokenizer crates/text/tests/data/tiny.gguf \
        --backend cuda --prompt "$P" -n 6 --temp 0 --ignore-eos "${extra[@]}" > "$OUT/ncu-$v.out" 2>&1
    row "ncu $v" "rc=$? ($(el))"
done
python3 tools/gpu/ncu_spec.py "$OUT/ncu-spec.csv" "$OUT/ncu-plain.csv" > "$OUT/verify-vs-step.txt" 2>&1
gzip -f "$OUT"/ncu-*.csv
pack
printf '%s\n' "${summary[@]}"
head -40 "$OUT/verify-vs-step.txt"
