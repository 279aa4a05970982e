#!/usr/bin/env bash
# The main job on the embedded default: build tally (with the llama.cpp peer, CPU), write a tiny
# synthetic qwen35moe model, show its plan and dead work, then measure tally and llama.cpp on the
# same file the same way (graph, standalone timing, in-graph replay, noise gate) and print the
# ledger. Outputs go to target/demo/ (ledger-pp64.{md,json,svg} and both measurements).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -p tally --features llama
T=target/release/tally
mkdir -p target/demo
$T synth --preset tiny --quant q4_k_m --seed 1 --out target/demo/tiny.gguf
$T graph --model target/demo/tiny.gguf -p 64
$T ledger --model target/demo/tiny.gguf --peer llama.cpp -p 64 -r 5 --out-dir target/demo
