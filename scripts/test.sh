#!/usr/bin/env bash
# The tests, as CI runs them: formatting, lints, and every test of the workspace (unit, golden vs
# transformers, bad input, fuzz properties, NVRTC compilation of every CUDA kernel, the llama.cpp
# peer on the CPU, end-to-end ledger on the tiny model), then the libFuzzer target for a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
eval "$(scripts/setup-cuda-local.sh --nvrtc-only)"
export TALLY_REQUIRE_NVRTC=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --features tally/llama -- -D warnings
cargo test --workspace --features tally/llama
# Coverage-guided fuzzing of GGUF reading, config validation and plan building, bounded (the
# one-hour campaign's result is in docs/results/fuzz-model-file.md).
scripts/fuzz.sh 60
