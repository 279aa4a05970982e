#!/usr/bin/env bash
# Generation on the GPU (issue 11 items 3, 4, 6). One call on a GPU machine, after
# scripts/gpu/pack.sh here and `cp <llama.cpp>/models/ggml-vocab-qwen35.gguf .carry/vocab/`;
# carry `.carry`.
#   1. greedy: `tally generate --temp 0` on the CPU and on CUDA, tiny q8_0 and tiny-odd bf16
#      (vocabulary: the text fixture crates/text/tests/data/tiny.gguf): the tokens must be
#      identical;
#   2. on-device sampling: CUDA with every filter and penalty on, --verify-sampler downloads the
#      logits each step and runs the CPU reference on them: `sampler_mismatches` must be 0;
#      the same seed twice gives the same tokens; also the full-vocabulary paths (top-k 0,
#      top-p 1) on the 35B-A3B file (248,320 logits);
#   3. multi-turn on the 35B-A3B Q4_K_M synth file with the real Qwen3.5 vocabulary: a scripted
#      3-turn `tally chat`, resuming (default) and with --no-resume (full re-prefill each turn);
#      the speeds lines give turn-2/3 TTFT both ways.
# Writes $OUT/gen-*.json|txt; prints PASS/FAIL lines and the TTFT table last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
BIG=${BIG:-/tmp/q4km.gguf}
VOCAB_TINY=crates/text/tests/data/tiny.gguf
VOCAB_QWEN=${VOCAB_QWEN:-.carry/vocab/ggml-vocab-qwen35.gguf}
[ -f "$BIG" ] || ( "$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --out "$BIG" > /dev/null 2>&1 ) &
T="$TALLY_NOPEER"
fail=0
for spec in "tiny q8_0 1" "tiny-odd bf16 2"; do
  set -- $spec
  f="/tmp/gen-$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --set vocab=${TINY_VOCAB:-427} --out "$f" > /dev/null 2>&1
  for be in cpu cuda; do
    timeout 120 "$T" generate --model "$f" --tokenizer "$VOCAB_TINY" --backend "$be" \
      --prompt "The quick brown fox" --temp 0 -n 64 --ignore-eos -o json > "$OUT/gen-greedy-$1-$be.json" 2> "$OUT/gen-greedy-$1-$be.err"
  done
  python3 - "$OUT" "$1" <<'PY' || fail=1
import json, sys
out, name = sys.argv[1:]
a, b = (json.load(open(f"{out}/gen-greedy-{name}-{be}.json")) for be in ("cpu", "cuda"))
same = a["tokens"] == b["tokens"]
first = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y), None)
print(f"{'PASS' if same else 'FAIL'} greedy cpu == cuda on {name}: {len(a['tokens'])} tokens"
      + ("" if same else f", first difference at {first}"))
sys.exit(0 if same else 1)
PY
  for run in 1 2; do
    timeout 120 "$T" generate --model "$f" --tokenizer "$VOCAB_TINY" --backend cuda \
      --prompt "The quick brown fox" --temp 0.9 --top-k 40 --top-p 0.9 --min-p 0.02 \
      --repeat-penalty 1.1 --presence-penalty 0.2 --frequency-penalty 0.1 --seed 7 -n 64 --ignore-eos \
      --verify-sampler -o json > "$OUT/gen-sample-$1-$run.json" 2> "$OUT/gen-sample-$1-$run.err"
  done
  python3 - "$OUT" "$1" <<'PY' || fail=1
import json, sys
out, name = sys.argv[1:]
a, b = (json.load(open(f"{out}/gen-sample-{name}-{r}.json")) for r in (1, 2))
ok = a["sampler_mismatches"] == 0 and a["tokens"] == b["tokens"]
print(f"{'PASS' if ok else 'FAIL'} device sampler on {name}: {a['sampler_mismatches']} of {len(a['tokens'])} steps differ from the CPU reference; same seed same tokens: {a['tokens'] == b['tokens']}")
sys.exit(0 if ok else 1)
PY
done
wait
if [ -f "$VOCAB_QWEN" ]; then
  for mode in "full 0 1" "filtered 40 0.9"; do
    set -- $mode
    timeout 300 "$T" generate --model "$BIG" --tokenizer "$VOCAB_QWEN" --backend cuda --prompt "Hello" \
      --temp 1.0 --top-k "$2" --top-p "$3" --min-p 0 --seed 3 -n 32 --ignore-eos --verify-sampler -o json \
      > "$OUT/gen-sample-35b-$1.json" 2> "$OUT/gen-sample-35b-$1.err"
    python3 -c "import json,sys; r=json.load(open('$OUT/gen-sample-35b-$1.json')); m=r['sampler_mismatches']; print(('PASS' if m==0 else 'FAIL')+f' device sampler on 35B ($1): {m} of {len(r[\"tokens\"])} steps differ; decode {r[\"decode_tokens_per_s\"]:.1f} tok/s')" || fail=1
  done
  turn1="Write a long story about a lighthouse keeper who finds a message in a bottle. $(printf 'The sea was grey and the wind was cold. %.0s' $(seq 1 40))"
  turn2="Now retell it from the point of view of the bottle, in the same length. $(printf 'Every wave mattered. %.0s' $(seq 1 20))"
  turn3="Summarise both in three sentences."
  for mode in resume no-resume; do
    flag=""; [ "$mode" = no-resume ] && flag="--no-resume"
    printf '%s\n%s\n%s\n' "$turn1" "$turn2" "$turn3" | timeout 500 "$T" chat --model "$BIG" --tokenizer "$VOCAB_QWEN" \
      --template crates/text/tests/data/templates/Qwen3.5-4B.jinja --backend cuda --temp 0 -n 128 --ignore-eos $flag \
      > "$OUT/gen-chat-$mode.txt" 2> "$OUT/gen-chat-$mode.err"
    echo "chat $mode rc=$?"
  done
  python3 - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
pat = re.compile(r"prompt (\d+) tokens \((\d+) resumed\) in ([0-9.]+) s")
rows = {m: [tuple(map(float, x)) for x in pat.findall(open(f"{out}/gen-chat-{m}.err").read())] for m in ("resume", "no-resume")}
print("turn | prompt tokens | resumed | TTFT resume (s) | TTFT re-prefill (s) | speedup")
for i, (a, b) in enumerate(zip(rows["resume"], rows["no-resume"])):
    print(f"{i+1} | {int(a[0])} | {int(a[1])} | {a[2]:.3f} | {b[2]:.3f} | {b[2]/a[2]:.1f}x")
PY
else
  echo "SKIP 35B steps: $VOCAB_QWEN missing"
fi
[ $fail = 0 ] && echo "generate.sh: all checks PASS" || echo "generate.sh: some checks FAIL"
