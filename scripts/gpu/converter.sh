#!/usr/bin/env bash
# The converter-made fixtures (llama.cpp's convert_hf_to_gguf.py from random transformers
# checkpoints; crates/engine/tests/fixtures/converter/) through the CUDA backend, node by node
# against the CPU reference (which CI holds to transformers' float64 logits). Also `tally info`
# on each, so a layout the GPU side reads differently shows up by name.
#   scripts/gpu/converter.sh            (after scripts/gpu/pack.sh; $TALLY is the carried binary)
#
# Every fixture runs. conv-a, conv-b and conv-a-mtp have head dims the CUDA kernels do not take
# (attention head dim 8, delta-rule key/value dims 8/16): they are expected to fail with the
# kernel's "supports ... dims" error, and that is reported as "fails at a kernel limit, as
# expected". conv-c (the real model's head dims) and conv-d-mtp (the other supported dims), and
# any fixture not named below, are expected to pass.
# Prints one row per file; exit status 1 if any outcome is not the expected one.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
dir=crates/engine/tests/fixtures/converter

# Why a fixture is expected to stop at a kernel limit (empty: expected to pass).
limit_of() {
  case "$1" in
    conv-a-*|conv-b-*) echo "attention head dim 8, delta-rule dims 8/16 (CUDA: attention 32/64/128/256, key 64/128, value 32..128)" ;;
    *) echo "" ;;
  esac
}

printf '== expected on CUDA ==\n'
for f in "$dir"/*.gguf; do
  case "$f" in *.ref.gguf) continue ;; esac
  n=$(basename "$f" .gguf); why=$(limit_of "$n")
  if [ -n "$why" ]; then printf '%-22s expected to FAIL at a kernel limit: %s\n' "$n" "$why"
  else printf '%-22s expected to pass\n' "$n"; fi
done

summary=(); failed=0
for f in "$dir"/*.gguf; do
  case "$f" in *.ref.gguf) continue ;; esac
  n=$(basename "$f" .gguf); why=$(limit_of "$n")
  if ! "$TALLY" info --model "$f" > "$OUT/info_$n.txt" 2>&1; then
    summary+=("$(printf '%-22s %s' "$n" "info FAILED (unexpected)")"); failed=1; continue
  fi
  # prompts of 1, 7 and 37 random ids (CONV_TOKENS: other lengths; the prefill attention kernels
  # take prompts of 64 tokens and more), then 8 decode steps (as many as the references have)
  timeout 300 "$TALLY" check --model "$f" --backend cuda --tokens "${CONV_TOKENS:-1,7,37}" -n 8 > "$OUT/check_$n.log" 2>&1; rc=$?
  printf -- '--- %s (rc %s)\n' "$n" "$rc"; tail -6 "$OUT/check_$n.log"
  if [ -z "$why" ]; then
    if [ $rc = 0 ]; then row="ok (expected to pass)"; else row="FAILED rc=$rc (expected to pass)"; failed=1; fi
  elif [ $rc = 0 ]; then
    row="passes, though expected to fail at a kernel limit: update limit_of in this script"; failed=1
  elif grep -q "supports .*dims" "$OUT/check_$n.log"; then
    row="fails at a kernel limit, as expected ($(grep -o "the CUDA [a-z ]*supports[^;]*" "$OUT/check_$n.log" | head -1))"
  else
    row="FAILED rc=$rc, but not at the expected kernel limit"; failed=1
  fi
  summary+=("$(printf '%-22s %s' "$n" "$row")")
done
printf '\n== converter fixtures on CUDA ==\n'; printf '%s\n' "${summary[@]}"
exit $failed
