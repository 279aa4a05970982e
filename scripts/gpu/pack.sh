#!/usr/bin/env bash
# Run HERE (where cargo is) before a GPU call: builds tally in release and puts a stripped copy in
# .carry/bin/tally (ignored by git; carry `.carry/bin`). With --llama, also packs the llama.cpp
# sources (scripts/gpu/llama-pack.sh) and builds tally with the dynamic-link llama.cpp peer; that
# binary needs llama.cpp's libraries to start, so a second one without the peer,
# .carry/bin/tally-nopeer, can work (synth, check) while those libraries build on the GPU host.
set -euo pipefail
cd "$(dirname "$0")/../.."
features=()
if [ "${1:-}" = "--llama" ]; then
    features=(--features llama-dynamic)
    [ -f .carry/llama.cpp/CMakeLists.txt ] || scripts/gpu/llama-pack.sh
fi
mkdir -p .carry/bin
if [ ${#features[@]} -gt 0 ]; then
    cargo build --release -p tally
    cp target/release/tally .carry/bin/tally-nopeer
    strip .carry/bin/tally-nopeer
fi
cargo build --release -p tally "${features[@]}"
cp target/release/tally .carry/bin/tally
strip .carry/bin/tally
ls -la .carry/bin/
