#!/usr/bin/env bash
# Run HERE (where cargo is) before a GPU call: builds tally in release and puts a stripped copy in
# .carry/bin/tally (ignored by git; carry `.carry/bin`). With --llama, also packs the llama.cpp
# sources (scripts/gpu/llama-pack.sh) and builds tally with the dynamic-link llama.cpp peer.
set -euo pipefail
cd "$(dirname "$0")/../.."
features=()
if [ "${1:-}" = "--llama" ]; then
    features=(--features llama-dynamic)
    [ -f .carry/llama.cpp/CMakeLists.txt ] || scripts/gpu/llama-pack.sh
fi
cargo build --release -p tally "${features[@]}"
mkdir -p .carry/bin
cp target/release/tally .carry/bin/tally
strip .carry/bin/tally
ls -la .carry/bin/tally
