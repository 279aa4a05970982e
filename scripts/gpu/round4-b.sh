#!/usr/bin/env bash
# GPU call 2 of 2 (third session), within 30 s of round4-a.sh (the machine keeps the llama.cpp
# build and /tmp/q4km.gguf while warm):
#   1. side by side with llama.cpp at tally's new default ubatch (8192): pp512, pp8192, tg128,
#      and tg128 at depth 8192 and 32768 (`-d`, llama-bench's meaning);
#   2. speculative decoding with replayed drafts at acceptance 0.5/0.7/0.9, k = 3, after the
#      arena and snapshot fixes (round 3: 0.37x / 0.43x / 0.77x of plain);
#   3. pp131072 at the default ubatch (memory flat).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
REAL_OUT=$OUT
export OUT=/tmp/o2; mkdir -p $OUT
BIG=${BIG:-/tmp/q4km.gguf}
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
t0=$(date +%s)
timeout 330 "$TALLY" bench -m "$BIG" --backend cuda --peer llama.cpp -p 512,8192 -n 128 -d 0,8192,32768 -r 5 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1; echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
cat "$OUT/bench-sbs.md"
for acc in 0.5 0.7 0.9; do
  timeout 60 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance $acc --out-dir "$OUT/spec$acc" -o md > "$OUT/spec$acc.md" 2>&1
  echo "spec acceptance $acc rc=$?: $(grep '^speculative' "$OUT/spec$acc.md")"
done
timeout 90 "$TALLY_NOPEER" run --model "$BIG" --backend cuda --tokens 131072 -n 0 -o json > "$OUT/run-131072.json" 2> "$OUT/run-131072.err"; rc=$?
python3 -c "import json; r=json.load(open('$OUT/run-131072.json')); print('pp131072 rc=$rc ubatch', r.get('ubatch'), round(r['prefill_tokens_per_s']), 'tok/s', round(r['prefill_ms']), 'ms, peak', round((r['device_memory_peak_bytes'] or 0)/2**30, 2), 'GiB')" 2>/dev/null || { echo "pp131072 rc=$rc"; tail -3 "$OUT/run-131072.err"; }
echo "round4-b: $(( $(date +%s) - t0 )) s"
tar czf "$REAL_OUT/r4b.tgz" -C /tmp o2
