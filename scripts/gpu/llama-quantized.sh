#!/usr/bin/env bash
# Not run itself: its check ran on 2026-12-06 inside scripts/gpu/stop39a.sh, which makes the
# files on the device (llama.cpp's quantiser from the same tiny bf16 source, ten mixes, no 46 MiB
# carry): all ten passed on an H100 (docs/results/2026-12-06-stop39/). The files of
# scripts/gpu/make-llama-quantized.sh (every block chosen by llama.cpp's quantiser, 9 mixes)
# through the CUDA backend, node by node against the CPU reference: prompts of 1, 7, 37 and
# 1,000 random ids (1,000 tokens over 8 experts top-2 is ~250 rows an expert: the wgmma MoE
# tiles, gs128 for Q4_K and MXFP4 experts), then 8 decode steps; `tally info` of each first.
# Prediction: all nine pass (the kernels decode the same formats the CPU does, and CI holds the
# CPU to ggml's to_float bit for bit on such files).
#   scripts/gpu/pack.sh && scripts/gpu/make-llama-quantized.sh   (here)
#   carry [".carry/bin/tally", ".carry/llamaq"]; run: bash scripts/gpu/llama-quantized.sh
# Prints one row per file; exit status 1 if any fails.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
summary=(); failed=0
for f in .carry/llamaq/*.gguf; do
  n=$(basename "$f" .gguf)
  if ! "$TALLY" info --model "$f" > "$OUT/info_$n.txt" 2>&1; then
    summary+=("$(printf '%-20s %s' "$n" "info FAILED")"); failed=1; continue
  fi
  timeout 300 "$TALLY" check --model "$f" --backend cuda --tokens 1,7,37,1000 -n 8 > "$OUT/check_$n.log" 2>&1; rc=$?
  printf -- '--- %s (rc %s)\n' "$n" "$rc"; tail -4 "$OUT/check_$n.log"
  if [ $rc = 0 ]; then row="ok"; else row="FAILED rc=$rc"; failed=1; fi
  summary+=("$(printf '%-20s %s' "$n" "$row")")
done
printf '\n== llama.cpp-quantised files on CUDA ==\n'; printf '%s\n' "${summary[@]}"
exit $failed
