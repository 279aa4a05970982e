#!/usr/bin/env bash
# One short GPU call, tally only (no llama.cpp build): does programmatic dependent launch help or
# hurt prefill? On the 4-layer file with the 35B shapes (--fill pool: seconds to write), pp512,
# pp8192 and tg128 under TALLY_PDL=small (the default: decode only), all and off, in the order
# small all off all small off (alternated: drifts show), each `tally bench -r 5`. Also one
# `tally check` (poisoned) on tiny q4_k_m with the default rule. $OUT/pdl-prefill.tgz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
REAL_OUT=$OUT
export OUT=/tmp/op; mkdir -p $OUT
T=$TALLY_NOPEER
t0=$(date +%s)
M=/tmp/l4.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out "$M" > /dev/null 2>&1
"$T" synth --preset tiny --quant q4_k_m --seed 3 --out /tmp/tiny.gguf > /dev/null 2>&1
# A fresh machine compiles every kernel with NVRTC on first use (~66 s): do it once, untimed.
timeout 90 "$T" run --model /tmp/tiny.gguf --backend cuda --tokens 8 -n 1 > /dev/null 2>&1
echo "kernels compiled/cached after $(( $(date +%s) - t0 )) s"
timeout 40 "$T" check --model /tmp/tiny.gguf --backend cuda --tokens 1,37,100 -n 4 > "$OUT/check-tiny.txt" 2>&1
echo "check tiny rc=$? $(tail -1 "$OUT/check-tiny.txt" | cut -c1-60)"
for mode in small all off all small off; do
  [ $(( $(date +%s) - t0 )) -lt 300 ] || { echo "$mode skipped (time)"; continue; }
  TALLY_PDL=$mode timeout 25 "$T" bench -m "$M" --backend cuda -p 512,8192 -n 128 -r 5 -o md \
    --out-dir "$OUT/b-$mode-$(date +%s)" > "$OUT/b-$mode.md.tmp" 2>&1
  echo "$mode: $(grep -E '^\| qwen' "$OUT/b-$mode.md.tmp" | awk -F'|' '{gsub(/ /,"",$(NF-2)); printf "%s %s; ", $(NF-2), $(NF-1)}')"
  cat "$OUT/b-$mode.md.tmp" >> "$OUT/b-$mode.md"
done | tee "$OUT/summary.txt"
echo "pdl-prefill: $(( $(date +%s) - t0 )) s"
tar czf "$REAL_OUT/pdl-prefill.tgz" -C /tmp op
