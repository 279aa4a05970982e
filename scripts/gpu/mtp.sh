#!/usr/bin/env bash
# The MTP draft head on CUDA (issue 13 item 3): the MTP step CUDA vs CPU (logits and output
# hidden states for the same random rows, one batch then row by row) on conv-d-mtp f32/q8_0/bf16
# and a synth tiny --mtp model, greedy speculative decoding with the MTP draft on CUDA identical
# to plain greedy on CUDA (k = 1..4, two prompts), then the CLI end to end.
#   HERE first:  scripts/gpu/pack.sh && scripts/gpu/mtp.sh --pack   (builds the test binary into .carry/bin)
#   GPU host:    scripts/gpu/mtp.sh                                   (carry .carry/bin)
# PASS lines: "cuda_mtp_step_matches_the_cpu ... ok", and "PASS generate --spec mtp" per model.
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--pack" ]; then
  set -e
  mkdir -p .carry/bin
  exe=$(cargo test --release -p tally-engine --test mtp --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="mtp": print(m["executable"])' | tail -1)
  cp "$exe" .carry/bin/engine-mtp-test && strip .carry/bin/engine-mtp-test && ls -la .carry/bin/engine-mtp-test
  exit 0
fi
. scripts/gpu/env.sh
fail=0
TALLY_TEST_CUDA=1 .carry/bin/engine-mtp-test cuda_mtp_step_matches_the_cpu --nocapture --test-threads 1 \
  > "$OUT/mtp-test.log" 2>&1 || fail=1
grep -E "rel err|greedy identical|test result|panicked" "$OUT/mtp-test.log" | head -60

# The CLI: generate --spec mtp on CUDA gives plain greedy's tokens on CUDA and on the CPU.
vocab=crates/tally/tests/fixtures/tiny-vocab.gguf
"$TALLY" synth --preset tiny --quant q8_0 --seed 5 --set vocab=427 --mtp --out /tmp/tiny-mtp.gguf > /dev/null
for m in /tmp/tiny-mtp.gguf crates/engine/tests/fixtures/converter/conv-d-mtp-f32.gguf; do
  tok=(); [ "$m" = /tmp/tiny-mtp.gguf ] && tok=(--tokenizer "$vocab")
  n=$(basename "$m" .gguf)
  base=("$TALLY" generate --model "$m" "${tok[@]}" --prompt "The quick brown fox" --temp 0 -n 24 --ignore-eos -o json)
  "${base[@]}" --backend cuda > "$OUT/gen-$n-plain-cuda.json" 2>"$OUT/gen-$n.err" || fail=1
  "${base[@]}" --backend cpu > "$OUT/gen-$n-plain-cpu.json" 2>>"$OUT/gen-$n.err" || fail=1
  for k in 1 2 3 4; do
    "${base[@]}" --backend cuda --spec mtp --draft-max $k > "$OUT/gen-$n-spec$k-cuda.json" 2>>"$OUT/gen-$n.err" || fail=1
  done
  python3 - "$OUT" "$n" <<'PY' || fail=1
import json, sys
out, n = sys.argv[1], sys.argv[2]
load = lambda s: json.load(open(f"{out}/gen-{n}-{s}.json"))
want = load("plain-cuda")["tokens"]
ok = load("plain-cpu")["tokens"] == want
for k in range(1, 5):
    r = load(f"spec{k}-cuda")
    st = r["spec"]["stats"]
    same = r["tokens"] == want
    ok &= same
    print(f"{n} k={k}: tokens {'identical' if same else 'DIFFER'}; {st['accepted']} of {st['drafted']} drafts kept")
print(("PASS" if ok else "FAIL") + f" generate --spec mtp on CUDA = plain greedy on CUDA and CPU ({n})")
sys.exit(0 if ok else 1)
PY
done
# The bench row (its own divergence check fails the command if spec != greedy).
"$TALLY" bench -m /tmp/tiny-mtp.gguf -p 1 -n 64 -r 3 --spec mtp --draft-max 3 --backend cuda -o md \
  --out-dir "$OUT/bench-mtp" > "$OUT/bench-mtp.md" 2>&1; rc=$?
tail -4 "$OUT/bench-mtp.md"; [ $rc = 0 ] || [ $rc = 3 ] || fail=1
exit $fail
