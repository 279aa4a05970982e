#!/usr/bin/env bash
# 2026-12-07, stop 54 (issue 13, speculative decoding): where the 40-layer verification step's
# device time goes. The 4-layer profile (docs/results/2026-12-04-h200-spec-profile/) named the
# GEMVs; since then gemvr4/gemvt4 (head), GEMV_MR (in-projections) and the decode fusions landed,
# and stop 52 measured a 4-token verification at 5.8 ms, 2.1 one-token steps (2.72 ms). Carry
# .carry/s53b.tar.xz (bin/tally without the peer, kcache).
#   1. the 35B-A3B Q4_K_M synth file with its MTP block (seed 1, pool fill);
#   2. ncu, kernels serialised, clocks and caches left alone: a plain greedy generation of 4
#      tokens (ncu_step.py: the last full one-token step per kernel) and the same prompt with
#      `--spec mtp --draft-max 3` (ncu_spec.py: steps split at each embedding lookup; the table
#      of the 4-row step is the verification).
# Prediction (written before): the verification's extra ~3 ms is mostly the routed experts
# (mmv gate/up and down over 32 pairs: ~3x one token's expert bytes, and per-pair blocks) and the
# 4-row attention and delta-rule kernels; the head's gemvt4 well under 0.2 ms.
set -u
LIMIT=${LIMIT:-570}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s54b s53b
SYNTH_MTP=1 synth_35b q4_k_m
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
P="The quick brown fox jumps over the lazy dog"
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/ncu-plain.csv" "$N" generate --model "$F" --tokenizer crates/text/tests/data/tiny.gguf \
    --backend cuda --prompt "$P" -n 4 --temp 0 --ignore-eos > "$OUT/ncu-plain.out" 2>&1
row "ncu plain" "rc=$? ($(el))"
python3 tools/gpu/ncu_step.py "$OUT/ncu-plain.csv" > "$OUT/step-plain.txt" 2>&1
gzip -f "$OUT/ncu-plain.csv"
pack
left=$(( LIMIT - $(date +%s) + t0 - 20 ))
timeout "$left" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$OUT/ncu-spec.csv" "$N" generate --model "$F" --tokenizer crates/text/tests/data/tiny.gguf \
    --backend cuda --prompt "$P" -n 8 --temp 0 --ignore-eos --spec mtp --draft-max 3 > "$OUT/ncu-spec.out" 2>&1
row "ncu spec" "rc=$? ($(el))"
python3 tools/gpu/ncu_spec.py "$OUT/ncu-spec.csv" "$OUT/ncu-plain.csv.gz" > "$OUT/steps-spec.txt" 2>&1
gzip -f "$OUT/ncu-spec.csv"
pack
printf '%s\n' "${summary[@]}"
head -40 "$OUT/step-plain.txt"
head -70 "$OUT/steps-spec.txt"
