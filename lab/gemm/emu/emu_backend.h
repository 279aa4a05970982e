// The CPU emulator's backend for lab/gemm/cases.h (see the contract at the top of cases.h):
// EmuMem's memory (emu_mem.h: garbage-filled, each buffer ending at a guard page), launches
// through emu::launch. Include after the emulator (cuda_fp16.h), gemm.cu, moe.cu and cases.h.
#pragma once
#include "emu_mem.h"

struct EmuBackend : EmuMem {
    void gemm(GemmFn f, unsigned gx, unsigned gy, int threads, size_t smem, const GemmArgs& a) {
        if (smem > emu::kDynSmemBytes) {
            std::printf("emu: smem %zu too large\n", smem);
            std::exit(2);
        }
        emu::launch({gx, gy, 1}, {unsigned(threads), 1, 1}, [&] { f(a); });
    }
    void route(const MoeRouteArgs& a, int blocks) {
        if (blocks > 1)
            emu::launch({unsigned(blocks), 1, 1}, {MOE_ROUTE_THREADS, 1, 1}, [&] { moe_route_count(a); });
        emu::launch({unsigned(blocks), 1, 1}, {MOE_ROUTE_THREADS, 1, 1}, [&] { moe_route(a); });
    }
    void dequant(const DequantRowsArgs& a, unsigned gx, unsigned gy) {
        emu::launch({gx, gy, 1}, {256, 1, 1}, [&] { dequant_rows(a); });
    }
    void xperm(const XPermArgs& a) {
        emu::launch({unsigned((int64_t(a.M) * (a.K / 8) + 255) / 256), 1, 1}, {256, 1, 1}, [&] { x_f16_perm(a); });
    }
    // o = silu(g) * u elementwise (the binary map's SwiGlu expression, tally_silu).
    void silu_mul(const float* g, const float* u, float* o, size_t n) {
        for (size_t i = 0; i < n; i++) o[i] = tally_silu(g[i]) * u[i];
    }
};
