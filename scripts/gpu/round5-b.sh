#!/usr/bin/env bash
# GPU call 2 of 2 (2026-12-02), within 30 s of round5-a.sh (the machine keeps the llama.cpp
# build and /tmp/q4km.gguf while warm):
#   1. side by side with llama.cpp, the rows of round 4: pp512, pp8192, tg128, and tg128 at
#      depth 8192 and 32768;
#   2. the binary before this session's decode changes (c956e84, .carry/bin/tally-before) on
#      the same file in the same call: tg128 at depth 0 and 8192 (tally only);
#   3. speculative decoding with replayed drafts at acceptance 0.9, k = 3.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
# The llama.cpp sources travel compressed (the carry limit): .carry/llama.tar.xz, made here with
# `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`.
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
REAL_OUT=$OUT
export OUT=/tmp/o2; mkdir -p $OUT
BIG=${BIG:-/tmp/q4km.gguf}
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
t0=$(date +%s)
# Idempotent: returns at once when call 1 finished both parts, else completes them.
scripts/gpu/prepare.sh > "$OUT/prepare-b.txt" 2>&1; tail -1 "$OUT/prepare-b.txt"
timeout 330 "$TALLY" bench -m "$BIG" --backend cuda --peer llama.cpp -p 512,8192 -n 128 -d 0,8192,32768 -r 5 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1; echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
cat "$OUT/bench-sbs.md"
for bin in tally-before tally-nopeer; do
  timeout 100 ".carry/bin/$bin" bench -m "$BIG" --backend cuda -p 512 -n 128 -d 0,8192 -r 5 -o md \
    --out-dir "$OUT/ab-$bin" > "$OUT/ab-$bin.md" 2>&1
  echo "== $bin rc=$?"; grep -E '^\| qwen' "$OUT/ab-$bin.md"
done
timeout 60 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
  --replay-acceptance 0.9 --out-dir "$OUT/spec0.9" -o md > "$OUT/spec0.9.md" 2>&1
echo "spec acceptance 0.9 rc=$?: $(grep '^speculative' "$OUT/spec0.9.md")"
echo "round5-b: $(( $(date +%s) - t0 )) s"
tar czf "$REAL_OUT/r5b.tgz" -C /tmp o2
