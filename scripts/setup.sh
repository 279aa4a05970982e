#!/usr/bin/env bash
# System packages the build needs (idempotent): cmake and libclang for llama-cpp-sys-2 (the
# llama.cpp peer is built from the sources that crate vendors), a C++ compiler, and a Rust
# toolchain. Each check tests the file or command its consumer uses.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
# The file bindgen loads (libclang.so*, not libclang-cpp.so*, which images often ship alone).
"$(dirname "$0")/lib/find-libclang.sh" >/dev/null || need+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" != 0 ] && sudo=sudo
    echo "setup: installing ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
    "$(dirname "$0")/lib/find-libclang.sh" >/dev/null ||
        { echo "setup: libclang-dev is installed but no libclang.so that bindgen loads was found" >&2; exit 1; }
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
exit 0
