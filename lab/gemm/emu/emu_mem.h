// The CPU emulator's device memory: host memory filled with garbage. Each allocation is its
// size rounded up to whole 16-byte vectors (as the engine's DevBuf::alloc and the lab's CUDA
// backend allocate), placed to end exactly at an inaccessible guard page: a kernel reading past
// the vectors its buffer owns (e.g. a weight window past the last block) faults instead of
// passing. Include after the emulator (cuda_fp16.h). EmuBackend (emu_backend.h) adds the
// GEMM lab's launches; lab/router/emu_test.cpp uses it alone.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

struct EmuMem {
    std::vector<std::pair<void*, size_t>> owned;  // mappings (base, length)
    template <class T>
    T* alloc(size_t n) {
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        const size_t bytes = std::max<size_t>((n * sizeof(T) + 15) / 16 * 16, 16);
        const size_t data = (bytes + page - 1) / page * page, len = data + page;
        void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || mprotect(static_cast<char*>(m) + data, page, PROT_NONE) != 0) {
            std::printf("emu: allocating %zu bytes failed\n", bytes);
            std::exit(2);
        }
        owned.push_back({m, len});
        char* p = static_cast<char*>(m) + data - bytes;  // ends at the guard page
        std::memset(p, 0xA5, bytes);
        return reinterpret_cast<T*>(p);
    }
    template <class T>
    T* upload(const std::vector<T>& v) {
        T* p = alloc<T>(v.size());
        std::memcpy(p, v.data(), v.size() * sizeof(T));
        return p;
    }
    void poison(float* p, size_t n) {
        for (size_t i = 0; i < n; i++) p[i] = NAN;
    }
    template <class T>
    std::vector<T> download(const T* p, size_t n) {
        return std::vector<T>(p, p + n);
    }
    void release() {
        for (const auto& [m, len] : owned) munmap(m, len);
        owned.clear();
    }
};
