#!/usr/bin/env bash
# Builds the packed llama.cpp sources (scripts/gpu/llama-pack.sh) on a GPU host: CUDA, shared
# libraries, release. (scripts/gpu/llama-build-local.sh builds the same libraries where cargo is,
# without a GPU and without device time: prefer it.) A tally binary built elsewhere with the peer's `dynamic-link` feature then
# runs against these libraries:
#
#   scripts/gpu/llama-build.sh                # sources .carry/llama.cpp, build dir target/llama-cuda
#   export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
#
# Environment: LLAMA_SRC (sources), LLAMA_BUILD_DIR (build dir), JOBS (default 16),
# CUDA_ARCH (default 90, the H100/H200), LLAMA_BENCH=0 (skip llama-bench even when packed). Needs cmake, a C++ compiler and nvcc; no network.
set -euo pipefail

src="${LLAMA_SRC:-.carry/llama.cpp}"
build="${LLAMA_BUILD_DIR:-target/llama-cuda}"
jobs="${JOBS:-16}"
arch="${CUDA_ARCH:-90}"

if [ ! -f "$src/CMakeLists.txt" ]; then
    echo "llama-build: no llama.cpp sources in $src (run scripts/gpu/llama-pack.sh where cargo is, and carry the folder)" >&2
    exit 1
fi
command -v cmake >/dev/null || { echo "llama-build: cmake not found" >&2; exit 1; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "llama-build: nvcc not found (is CUDA on PATH?)" >&2; exit 1; }
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"

targets=(llama ggml)
bench=OFF
if [ "${LLAMA_BENCH:-1}" = 0 ]; then
    echo "llama-build: LLAMA_BENCH=0: building llama and ggml only"
elif [ -f "$src/tools/llama-bench/llama-bench.cpp" ]; then
    bench=ON
    targets+=(llama-bench)
else
    echo "llama-build: the packed sources have no tools/llama-bench (llama-cpp-sys-2 does not ship it): building llama and ggml only"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

cat "$src/PACK-INFO" 2>/dev/null || true
t0=$(date +%s)
. "$(dirname "$0")/llama-cmake-flags.sh"
llama_cmake_flags "$arch" "$bench"
cmake -S "$src" -B "$build" "${generator[@]}" "${LLAMA_CMAKE_FLAGS[@]}"
t1=$(date +%s)
cmake --build "$build" --config Release -j "$jobs" --target llama ggml
# llama-bench comes from another llama.cpp commit: a failure to build it must not cost the libraries.
bench_built=no
if [ "$bench" = ON ]; then
    if cmake --build "$build" --config Release -j "$jobs" --target llama-bench; then
        bench_built=yes
    else
        echo "llama-build: llama-bench did not build against these sources; the libraries did" >&2
    fi
fi
t2=$(date +%s)

echo
echo "llama-build: configure $((t1 - t0)) s, build $((t2 - t1)) s (targets: ${targets[*]}, -j $jobs, sm_$arch)"
ls -l "$build"/bin/lib*.so* 2>/dev/null || true
[ "$bench_built" = yes ] && ls -l "$build/bin/llama-bench"
echo "run tally with: export LD_LIBRARY_PATH=\"$(cd "$build/bin" && pwd):\${LD_LIBRARY_PATH:-}\""
