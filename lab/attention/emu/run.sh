#!/bin/bash
# CPU emulation check of crates/engine/src/cuda/kernels/attention.cu (no GPU needed).
# Usage: lab/attention/emu/run.sh [--quick | --full] [scheduler seed]
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${TMPDIR:-/tmp}/attn_emu
mkdir -p "$build"
python3 "$here/gen.py" "$root/crates/engine/src/cuda/kernels/attention.cu" "$build/attention_emu.inc"
g++ -std=c++17 -O1 -g -Wno-unknown-pragmas -I "$here" -I "$build" -I "$root/crates/engine/src/cuda/kernels" \
    "$here/emu.cpp" -o "$build/emu"
"$build/emu" "$@"
