#!/usr/bin/env bash
# The converter-made fixtures (llama.cpp's convert_hf_to_gguf.py from random transformers
# checkpoints; crates/engine/tests/fixtures/converter/) through the CUDA backend, node by node
# against the CPU reference (which CI holds to transformers' float64 logits). Also `tally info`
# on each, so a layout the GPU side reads differently shows up by name.
#   scripts/gpu/converter.sh            (after scripts/gpu/pack.sh; $TALLY is the carried binary)
# Prints one row per file; exit status 1 if any check failed.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
dir=crates/engine/tests/fixtures/converter
summary=(); failed=0
for f in "$dir"/*.gguf; do
  case "$f" in *.ref.gguf) continue ;; esac
  n=$(basename "$f" .gguf)
  "$TALLY" info --model "$f" > "$OUT/info_$n.txt" 2>&1 || { summary+=("$(printf '%-22s %s' "$n" "info FAILED")"); failed=1; continue; }
  # prompts of 1, 7 and 37 random ids, then 8 decode steps (as many as the references have)
  timeout 300 "$TALLY" check --model "$f" --backend cuda --tokens 1,7,37 -n 8 > "$OUT/check_$n.log" 2>&1; rc=$?
  tail -6 "$OUT/check_$n.log"
  summary+=("$(printf '%-22s %s' "$n" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")")")
  [ $rc = 0 ] || failed=1
done
printf '\n== converter fixtures on CUDA ==\n'; printf '%s\n' "${summary[@]}"
exit $failed
