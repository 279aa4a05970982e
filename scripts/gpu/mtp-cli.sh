#!/usr/bin/env bash
# One short GPU call: greedy speculative decoding with the MTP draft on CUDA (k = 1, 3) gives plain
# greedy's tokens on CUDA and on the CPU, on a synth tiny --mtp file and the converter-made MTP
# fixture (the CLI part of scripts/gpu/mtp.sh, with the binary that needs no llama.cpp libraries).
# Carry .carry/bin. Written 2026-12-02 (fourth session), not yet run: the GPU budget was spent.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T=$TALLY_NOPEER
vocab=crates/tally/tests/fixtures/tiny-vocab.gguf
"$T" synth --preset tiny --quant q8_0 --seed 5 --set vocab=427 --mtp --out /tmp/tiny-mtp.gguf > /dev/null
for m in /tmp/tiny-mtp.gguf crates/engine/tests/fixtures/converter/conv-d-mtp-f32.gguf; do
  tok=(); [ "$m" = /tmp/tiny-mtp.gguf ] && tok=(--tokenizer "$vocab")
  n=$(basename "$m" .gguf)
  base=("$T" generate --model "$m" "${tok[@]}" --prompt "The quick brown fox" --temp 0 -n 24 --ignore-eos -o json)
  "${base[@]}" --backend cuda > /tmp/g-$n-plain.json 2>/dev/null
  "${base[@]}" --backend cpu > /tmp/g-$n-cpu.json 2>/dev/null
  for k in 1 3; do "${base[@]}" --backend cuda --spec mtp --draft-max $k > /tmp/g-$n-s$k.json 2>/dev/null; done
  python3 - $n <<'PY'
import json,sys
n=sys.argv[1]; L=lambda s: json.load(open(f"/tmp/g-{n}-{s}.json"))["tokens"]
w=L("plain"); ok = L("cpu")==w and L("s1")==w and L("s3")==w
print(("PASS" if ok else "FAIL"), n, "spec k=1,3 on CUDA == plain CUDA == CPU greedy", len(w), "tokens")
PY
done
