#!/usr/bin/env bash
# Writes the fuzz seed corpus: tiny valid qwen35moe models from `tally synth` of the tiny presets,
# shrunk with --set so each stays near 100-200 KB (libFuzzer mutates every byte of an input; small
# seeds mean more executions per second). The shapes keep what the reader and the config check
# distinguish: Q8_0 and BF16 matrices, a linear and a full layer, the tiny-odd head ratios.
# Usage: tools/fuzz-seeds.sh [TALLY_BINARY]   (default: cargo run --release -p tally)
set -euo pipefail
cd "$(dirname "$0")/.."
out=fuzz/seeds/model_file
mkdir -p "$out"
if [[ $# -ge 1 ]]; then tally=("$1"); else tally=(cargo run -q --release -p tally --); fi
small=(--set n_layers=2 --set interval=2 --set vocab=260 --set n_experts=4 --set n_experts_used=2
  --set expert_ffn=32 --set shared_ffn=32 --set head_dim=16 --set rope_dims=8 --set n_head=2
  --set ssm_k_dim=16 --set ssm_v_dim=16)
"${tally[@]}" synth --preset tiny --quant q8_0 --set hidden=64 "${small[@]}" \
  --out "$out/tiny-q8_0.gguf" >/dev/null
"${tally[@]}" synth --preset tiny --quant bf16 --set hidden=32 "${small[@]}" \
  --out "$out/tiny-bf16.gguf" >/dev/null
"${tally[@]}" synth --preset tiny-odd --quant bf16 --set hidden=32 "${small[@]}" \
  --set n_layers=3 --set vocab=301 --set n_experts_used=3 --out "$out/tiny-odd-bf16.gguf" >/dev/null
ls -l "$out"
