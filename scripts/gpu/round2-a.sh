#!/usr/bin/env bash
# GPU call 1 of 2 (2026-12-01, second round): while llama.cpp's CUDA libraries build and the
# 35B-A3B Q4_K_M synth file is written (scripts/gpu/prepare.sh, in the background), run the
# short checks that need neither:
#   1. cold start: `tally run` on tiny with an empty kernel cache, then warm (load_ms);
#   2. `tally check --backend cuda` on the quant mixes the last call did not reach
#      (mid q3_k_m, tiny and mid q2_k);
#   3. the converter-made fixtures through CUDA (scripts/gpu/converter.sh).
# Then waits for prepare. Call 2 (scripts/gpu/round2-b.sh) must follow within 30 s.
# Carry: .carry (scripts/gpu/pack.sh --llama; .carry/llama.cpp; .carry/vocab).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }
# SKIP_PREPARE=1: the caller runs prepare.sh itself (scripts/gpu/round3-a.sh).
prep=
[ -n "${SKIP_PREPARE:-}" ] || { ( scripts/gpu/prepare.sh > "$OUT/prepare.txt" 2>&1 ) & prep=$!; }
T="$TALLY_NOPEER"
"$T" synth --preset tiny --quant q8_0 --seed 1 --out /tmp/tiny-q8_0.gguf > /dev/null 2>&1
cold=$(mktemp -d)
for c in cold warm; do
  TALLY_CACHE=$cold timeout 120 "$T" run --model /tmp/tiny-q8_0.gguf --backend cuda --tokens 4 -o json \
    > "$OUT/start-$c.json" 2> "$OUT/start-$c.err"
  row "start $c load_ms" "$(python3 -c "import json; print(round(json.load(open('$OUT/start-$c.json'))['load_ms']))" 2>/dev/null || tail -2 "$OUT/start-$c.err")"
done
seed=40
for spec in "mid q3_k_m" "tiny q2_k" "mid q2_k"; do
  set -- $spec
  f="/tmp/quants-$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed $seed --out "$f" > /dev/null 2>&1
  timeout 150 "$T" check --model "$f" --backend cuda --tokens 1,37,100 -n 2 > "$OUT/check-$1-$2.txt" 2>&1; rc=$?
  tail -3 "$OUT/check-$1-$2.txt"
  row "check $1 $2" "rc=$rc $(grep -oiE 'pass|fail' "$OUT/check-$1-$2.txt" | tail -1)"
  seed=$((seed + 1))
done
TALLY="$T" scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1
sed -n '/== converter/,$p' "$OUT/converter.txt"
[ -z "$prep" ] || { wait $prep; tail -4 "$OUT/prepare.txt"; }
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}"
