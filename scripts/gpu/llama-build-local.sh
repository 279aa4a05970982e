#!/usr/bin/env bash
# Builds llama.cpp's CUDA libraries (the sources tally's peer binds to, llama-cpp-sys-2's) HERE,
# on a machine without a GPU, so no device time goes to the build (scripts/gpu/llama-build.sh on
# the GPU host took 329 s of a 600 s call). CUDA 13.0's nvcc, runtime and cuBLAS, cmake and ninja
# come from PyPI wheels into their own folder (not /opt/cu13: `pip --target --upgrade` replaces
# the folders it installs into, and the tests' NVRTC lives there); the driver library, which a
# machine without a GPU lacks, is a stub holding the driver functions ggml-cuda calls (its
# virtual-memory pool), so the libraries record libcuda.so.1 as needed and bind to the GPU host's
# real one. The flags are llama-build.sh's (scripts/gpu/llama-cmake-flags.sh), for sm_90.
#
#   scripts/gpu/llama-build-local.sh [OUT_DIR]     # default .carry/llama-lib (ignored by git)
#
# Then carry OUT_DIR (about 70 MB; 45 MB as .tar.xz with a stripped tally) and on the GPU host:
#   export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:$LD_LIBRARY_PATH"
# with a tally built with `--features llama-dynamic` (scripts/gpu/pack.sh --llama). About 30
# minutes on 2 cores; run again, it only rebuilds what changed. Environment: JOBS (default: the
# cores), TALLY_CU13_LLAMA (the wheels' folder, default /opt/cu13-llama), LLAMA_BUILD_DIR
# (default target/llama-cuda-local), LLAMA_SRC (packed sources, default LLAMA_BUILD_DIR/src).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-.carry/llama-lib}"
dir="${TALLY_CU13_LLAMA:-/opt/cu13-llama}"
build="${LLAMA_BUILD_DIR:-target/llama-cuda-local}"
src="${LLAMA_SRC:-$build/src}"
jobs="${JOBS:-$(nproc)}"
cu="$dir/nvidia/cu13"
# The driver functions ggml-cuda calls directly (ggml-cuda.cu's VMM pool, cuGetErrorString).
# The check after the build fails if the libraries need one that is not here.
driver_fns=(cuDeviceGet cuDeviceGetAttribute cuGetErrorString cuMemAddressFree cuMemAddressReserve
    cuMemCreate cuMemGetAllocationGranularity cuMemMap cuMemRelease cuMemSetAccess cuMemUnmap)

if [ ! -x "$cu/bin/nvcc" ] || [ ! -f "$cu/lib/libcublas.so.13" ] || [ ! -x "$dir/bin/cmake" ]; then
    echo "llama-build-local: installing CUDA 13.0 nvcc, runtime, cuBLAS, cmake and ninja wheels into $dir" >&2
    mkdir -p "$dir"
    python3 -m pip install -q --upgrade --target "$dir" nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 \
        nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88 \
        "nvidia-cuda-cccl==13.0.*" "nvidia-cublas==13.0.*" cmake ninja >&2
fi
# The layout CMake's FindCUDAToolkit looks for: lib64, unversioned names, lib64/stubs/libcuda.so.
ln -sfn lib "$cu/lib64"
for l in cublas cublasLt cudart; do ln -sf "lib$l.so.13" "$cu/lib/lib$l.so"; done
mkdir -p "$cu/lib/stubs"
stub_c="$cu/lib/stubs/libcuda-stub.c"
printf 'int %s(void) { return 1; }\n' "${driver_fns[@]}" > "$stub_c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$cu/lib/stubs/libcuda.so" "$stub_c"

export PATH="$dir/bin:$cu/bin:$PATH" PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$src/CMakeLists.txt" ] || scripts/gpu/llama-pack.sh "$src"
. scripts/gpu/llama-cmake-flags.sh
llama_cmake_flags 90 OFF
cmake -S "$src" -B "$build" -G Ninja "${LLAMA_CMAKE_FLAGS[@]}" \
    -DCMAKE_CUDA_COMPILER="$cu/bin/nvcc" -DCUDAToolkit_ROOT="$cu" > "$build.configure.log"
t0=$(date +%s)
cmake --build "$build" -j "$jobs" --target llama ggml
lib="$build/bin/libggml-cuda.so"
# The stub must have given the libraries their driver dependency, and every driver function
# they call must be one the GPU host's libcuda.so.1 will provide by that name.
if ! readelf -d "$lib" | grep -q 'NEEDED.*libcuda\.so\.1'; then
    echo "llama-build-local: $lib does not record libcuda.so.1 as needed" >&2
    exit 1
fi
missing=$(nm -D --undefined-only "$lib" | awk '$2 ~ /^cu[A-Z]/ {print $2}' | grep -vxF -f <(printf '%s\n' "${driver_fns[@]}") || true)
if [ -n "$missing" ]; then
    echo "llama-build-local: ggml-cuda calls driver functions the stub lacks: $missing (add them to driver_fns)" >&2
    exit 1
fi
mkdir -p "$out"
rm -f "$out"/lib*.so*
cp -a "$build"/bin/lib*.so* "$out"/
for f in "$out"/lib*.so.*.*; do strip "$f"; done
echo "llama-build-local: built in $(($(date +%s) - t0)) s; $(du -sh "$out" | cut -f1) in $out ($(cat "$src/PACK-INFO" | head -1))"
