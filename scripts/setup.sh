#!/usr/bin/env bash
# System packages the build needs (idempotent): cmake and libclang for llama-cpp-sys-2 (the
# llama.cpp peer is built from the sources that crate vendors), and a Rust toolchain.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" != 0 ] && sudo=sudo
    echo "setup: installing ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
exit 0
