// The CPU emulator's backend for lab/gemm/cases.h (see the contract at the top of cases.h):
// host memory, 256-byte aligned allocations filled with garbage, launches through emu::launch.
// Include after the emulator (cuda_fp16.h), gemm.cu, moe.cu and cases.h.
#pragma once
#include <cstdlib>
#include <cstring>
#include <vector>

struct EmuBackend {
    std::vector<void*> owned;
    template <class T>
    T* alloc(size_t n) {
        const size_t bytes = ((n * sizeof(T) + 64) + 255) / 256 * 256;
        void* p = std::aligned_alloc(256, bytes);
        std::memset(p, 0xA5, bytes);
        owned.push_back(p);
        return static_cast<T*>(p);
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
    void gemm(GemmFn f, unsigned gx, unsigned gy, int threads, size_t smem, const GemmArgs& a) {
        if (smem > emu::kDynSmemBytes) {
            std::printf("emu: smem %zu too large\n", smem);
            std::exit(2);
        }
        emu::launch({gx, gy, 1}, {unsigned(threads), 1, 1}, [&] { f(a); });
    }
    void route(const MoeRouteArgs& a) { emu::launch({1, 1, 1}, {MOE_ROUTE_THREADS, 1, 1}, [&] { moe_route(a); }); }
    void dequant(const DequantRowsArgs& a, unsigned gx, unsigned gy) {
        emu::launch({gx, gy, 1}, {256, 1, 1}, [&] { dequant_rows(a); });
    }
    void release() {
        for (void* p : owned) std::free(p);
        owned.clear();
    }
};
