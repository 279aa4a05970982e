#!/usr/bin/env bash
# GPU call 2 of 3 (2026-12-02), within 30 s of pdl.sh (the machine keeps the llama.cpp build
# and /tmp/q4km.gguf while warm):
#   1. side by side with llama.cpp on the 35B Q4_K_M file: pp512, pp8192, tg128 and tg128 at
#      depth 8192 and 32768 (tally with PDL, the default);
#   2. tally with TALLY_PDL=off on the same file in the same call: tg128 at depth 0 and 8192,
#      pp512 (the A/B of the launch change on the whole model);
#   3. speculative decoding with replayed drafts at acceptance 0.9, k = 3;
#   4. if time is left, the decode-step ledger at depth 512 against llama.cpp.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
REAL_OUT=$OUT
export OUT=/tmp/o2; mkdir -p $OUT
BIG=${BIG:-/tmp/q4km.gguf}
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare-b.txt" 2>&1; tail -1 "$OUT/prepare-b.txt"
timeout 300 "$TALLY" bench -m "$BIG" --backend cuda --peer llama.cpp -p 512,8192 -n 128 -d 0,8192,32768 -r 3 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1; echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
cat "$OUT/bench-sbs.md"
TALLY_PDL=off timeout 90 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 512 -n 128 -d 0,8192 -r 3 -o md \
  --out-dir "$OUT/nopdl" > "$OUT/bench-nopdl.md" 2>&1
echo "== no PDL rc=$?"; grep -E '^\| qwen' "$OUT/bench-nopdl.md"
timeout 60 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
  --replay-acceptance 0.9 --out-dir "$OUT/spec0.9" -o md > "$OUT/spec0.9.md" 2>&1
echo "spec acceptance 0.9 rc=$?: $(grep '^speculative' "$OUT/spec0.9.md")"
left=$(( 560 - ($(date +%s) - t0) ))
if [ "$left" -gt 90 ]; then
  timeout "$left" "$TALLY" ledger --model "$BIG" --backend cuda --peer llama.cpp --step-at 512 -r 5 \
    --busy-limit 64 --out-dir "$OUT/ledger-d512" > "$OUT/ledger-d512.txt" 2>&1; echo "ledger d512 rc=$?"
  head -40 "$OUT/ledger-d512.txt"
else
  echo "ledger d512 skipped: $left s left"
fi
echo "sbs-pdl: $(( $(date +%s) - t0 )) s"
tar czf "$REAL_OUT/sbs.tgz" -C /tmp o2
