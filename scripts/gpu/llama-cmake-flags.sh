# Sourced by scripts/gpu/llama-build.sh (on the GPU host) and llama-build-local.sh (here): the
# one set of CMake flags both build llama.cpp's CUDA libraries with (shared, release, CUDA for
# one architecture, no NCCL, no native CPU flags, no curl/openssl, no tests or examples).
#   llama_cmake_flags ARCH BENCH     # sets LLAMA_CMAKE_FLAGS; BENCH=ON also builds llama-bench's deps
llama_cmake_flags() {
    LLAMA_CMAKE_FLAGS=(
        -DCMAKE_BUILD_TYPE=Release
        -DBUILD_SHARED_LIBS=ON
        -DGGML_CUDA=ON
        -DGGML_CUDA_NCCL=OFF
        -DCMAKE_CUDA_ARCHITECTURES="$1"
        -DGGML_NATIVE=OFF
        -DLLAMA_BUILD_COMMON="$2"
        -DLLAMA_BUILD_TOOLS="$2"
        -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_SERVER=OFF
        -DLLAMA_BUILD_APP=OFF
        -DLLAMA_CURL=OFF
        -DLLAMA_OPENSSL=OFF
    )
}
