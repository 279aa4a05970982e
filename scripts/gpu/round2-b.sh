#!/usr/bin/env bash
# GPU call 2 of 2 (2026-12-01, second round), within 30 s of round2-a.sh (the machine keeps the
# llama.cpp build and /tmp/q4km.gguf while warm):
#   1. `tally bench --peer llama.cpp`: pp512, pp2048, pp8192, tg128, side by side in one run;
#   2. tally's physical batch: pp8192 and pp32768 at --ubatch 2048, 4096, 8192 and 0 (one batch),
#      with tally's device allocation peak per run;
#   2b. speculative decoding with replayed drafts at acceptance 0.5/0.7/0.9, k = 3;
#   3. generation through `tally serve --backend cuda` (35B, real Qwen vocabulary):
#      tools/serve/speed.py, sequential and 4 concurrent streams, 128 tokens each, against
#      `tally generate` on the same prompt.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
BIG=${BIG:-/tmp/q4km.gguf}
VOCAB=.carry/vocab/ggml-vocab-qwen35.gguf
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
t0=$(date +%s)
timeout 300 "$TALLY" bench -m "$BIG" --backend cuda --peer llama.cpp -p 512,2048,8192 -n 128 -r 5 \
  --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1; echo "bench rc=$? after $(( $(date +%s) - t0 )) s"
cp "$OUT/sbs/bench.json" "$OUT/bench-sbs.json" 2>/dev/null
cat "$OUT/bench-sbs.md"
for ub in 2048 4096 8192 0; do
  timeout 120 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 8192,32768 -n 0 -r 3 --ubatch $ub \
    --out-dir "/tmp/ub$ub" -o md > "$OUT/ub$ub.md" 2>&1; rc=$?
  echo "ubatch $ub rc=$rc: $(grep -E 'pp(8192|32768)' "$OUT/ub$ub.md" | awk -F'|' '{print $8 $9}' | tr -s ' ' | tr '\n' ' ') $(grep -o 'peak [0-9.]* GiB' "$OUT/ub$ub.md")"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = []
for ub in (2048, 4096, 8192, 0):
    try:
        b = json.load(open(f"/tmp/ub{ub}/bench.json"))
    except Exception as e:
        print("ubatch", ub, "no bench.json", e); continue
    for r in b["rows"]:
        rows.append({"ubatch": ub, "test": r["test"], "avg_ts": r["avg_ts"], "stddev_ts": r["stddev_ts"],
                     "peak_gib": (b.get("tally_device_memory_peak_bytes") or 0) / 2**30})
json.dump(rows, open(f"{out}/ubatch.json", "w"), indent=1)
PY
# 2b. speculative decoding with replayed drafts (verify k drafts per step, restore + recompute)
for acc in 0.5 0.7 0.9; do
  timeout 100 "$TALLY_NOPEER" bench -m "$BIG" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance $acc --out-dir "/tmp/spec$acc" -o md > "$OUT/spec$acc.md" 2>&1
  echo "spec acceptance $acc rc=$?: $(grep '^speculative' "$OUT/spec$acc.md")"
done
# 3. through the server
"$TALLY_NOPEER" serve --model "$BIG" --backend cuda --tokenizer "$VOCAB" --template crates/text/tests/data/templates/Qwen3.5-4B.jinja --port 8391 --ctx 4096 \
  > "$OUT/serve.log" 2>&1 &
sp=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8391/health > /dev/null && break; sleep 1; done
timeout 240 python3 tools/serve/speed.py --base-url http://127.0.0.1:8391 --model q4km --requests 5 \
  --streams 4 --max-tokens 128 --json "$OUT/serve-speed.json"; echo "speed rc=$?"
kill -INT $sp; wait $sp 2>/dev/null
timeout 120 "$TALLY_NOPEER" generate --model "$BIG" --backend cuda --tokenizer "$VOCAB" --temp 0 --ignore-eos -n 128 \
  --prompt "$(python3 -c 'print("The history of the river begins in the mountains, where " * 8)')" -o json \
  > "$OUT/generate.json" 2> "$OUT/generate.err"
python3 -c "import json; g=json.load(open('$OUT/generate.json')); print('tally generate:', {k: v for k, v in g.items() if 'per_s' in k or 'tokens' in k})" 2>/dev/null || tail -3 "$OUT/generate.err"
echo "round2-b: $(( $(date +%s) - t0 )) s"
# 4. a 131,072-token prompt in batches of 4096 (memory flat in the prompt length)
timeout 150 "$TALLY_NOPEER" run --model "$BIG" --backend cuda --tokens 131072 -n 0 -o json > "$OUT/run-131072.json" 2> "$OUT/run-131072.err"; rc=$?
python3 -c "import json; r=json.load(open('$OUT/run-131072.json')); print('pp131072 rc=$rc', round(r['prefill_tokens_per_s']), 'tok/s', round(r['prefill_ms']), 'ms, peak', round((r['device_memory_peak_bytes'] or 0)/2**30, 2), 'GiB')" 2>/dev/null || { echo "pp131072 rc=$rc"; tail -3 "$OUT/run-131072.err"; }
echo "round2-b total: $(( $(date +%s) - t0 )) s"
