#!/usr/bin/env bash
# Packs the llama.cpp sources vendored by the crates.io crate llama-cpp-sys-2 (the exact sources
# tally's peer binds to) into a folder that can travel to a GPU host without network or Rust,
# where scripts/gpu/llama-build.sh builds them with CUDA.
#
#   scripts/gpu/llama-pack.sh [OUT_DIR] [--bench-src LLAMA_CPP_TREE]
#
# OUT_DIR defaults to .carry/llama.cpp (ignored by git; carry that path). Backends other than
# CPU and CUDA, docs, tests, examples and Python tools are pruned (about 25 MB remain).
# The crate ships without tools/llama-bench; --bench-src copies tools/llama-bench from another
# llama.cpp tree (its commit differs from the crate's: it may not compile against these sources).
set -euo pipefail

out=".carry/llama.cpp"
bench_src=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bench-src) bench_src="${2:?--bench-src needs a llama.cpp tree}"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) out="$1"; shift ;;
    esac
done

repo_root="$(cd "$(dirname "$0")/../.." && pwd)"
version="$(awk '/^name = "llama-cpp-sys-2"/ { getline; gsub(/"/, "", $3); print $3; exit }' "$repo_root/Cargo.lock")"
if [ -z "$version" ]; then
    echo "llama-pack: llama-cpp-sys-2 is not in Cargo.lock" >&2
    exit 1
fi
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
src="$(ls -d "$registry"/*/llama-cpp-sys-2-"$version"/llama.cpp 2>/dev/null | head -1 || true)"
if [ -z "$src" ]; then
    echo "llama-pack: llama-cpp-sys-2 $version is not unpacked; running cargo fetch" >&2
    (cd "$repo_root" && cargo fetch --quiet)
    src="$(ls -d "$registry"/*/llama-cpp-sys-2-"$version"/llama.cpp | head -1)"
fi

rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -a "$src" "$out"

# Not needed to build libllama, libggml* and (optionally) llama-bench with CUDA.
for d in docs examples tests pocs gguf-py grammars models ci convert_hf_to_gguf.py; do
    rm -rf "${out:?}/$d"
done
for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
    rm -rf "$out"/ggml/src/ggml-"$b"
done

if [ -n "$bench_src" ]; then
    if [ ! -f "$bench_src/tools/llama-bench/llama-bench.cpp" ]; then
        echo "llama-pack: $bench_src/tools/llama-bench/llama-bench.cpp not found" >&2
        exit 1
    fi
    rm -rf "$out/tools/llama-bench"
    cp -a "$bench_src/tools/llama-bench" "$out/tools/llama-bench"
    # The crate's tools/CMakeLists.txt names tools it does not ship: build llama-bench alone.
    printf 'llama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' > "$out/tools/CMakeLists.txt"
fi

{
    echo "llama-cpp-sys-2 $version"
    echo "source: $src"
    echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    [ -n "$bench_src" ] && echo "llama-bench from: $bench_src (a different llama.cpp commit)"
    echo "sha256 of the file list and contents:"
    (cd "$out" && find . -type f ! -name PACK-INFO -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
} > "$out/PACK-INFO"

echo "packed llama.cpp from llama-cpp-sys-2 $version into $out ($(du -sh "$out" | cut -f1))"
