#!/usr/bin/env bash
# The main job on the embedded default: build tally (with the llama.cpp peer, CPU), write a tiny
# synthetic qwen35moe model, show its plan and dead work, then measure tally and llama.cpp on the
# same file the same way (graph, standalone timing, in-graph replay, noise gate) and print the
# ledger. Outputs go to target/demo/ (ledger-pp128.{md,json,svg} and both measurements).
#
# Defaults for a quiet 2-core machine (README "The demo" says why):
# - one thread per engine (DEMO_THREADS): with two threads on two cores, every replayed category
#   pays a thread-pool wake-up and cache refill after its barrier (~0.3 ms each, 14 categories:
#   +14% on the sum of increments, validation (b)), and any background process collides with a
#   worker, so the noise gate discards window after window; one thread leaves a core free;
# - 128 prompt tokens (DEMO_TOKENS): per-node work grows with the prompt, that fixed cost does
#   not; 5 clean windows per group (DEMO_REPEATS).
# Exit code: 0 trusted ledger; 3 measured but "no verdict" (a validation failed or the noise gate
# ran out of retries: the WARNINGS say which); 1/2 as every tally command.
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${DEMO_TOKENS:-128}
threads=${DEMO_THREADS:-1}
repeats=${DEMO_REPEATS:-5}
scripts/setup.sh
cargo build --release -p tally --features llama
T=target/release/tally
mkdir -p target/demo
$T synth --preset tiny --quant q4_k_m --seed 1 --out target/demo/tiny.gguf
$T graph --model target/demo/tiny.gguf -p "$tokens"
$T ledger --model target/demo/tiny.gguf --peer llama.cpp -p "$tokens" -t "$threads" \
  -r "$repeats" --out-dir target/demo
