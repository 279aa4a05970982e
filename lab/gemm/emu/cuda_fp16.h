// CPU emulation of the CUDA features the GEMM kernels use, so that gemm.cu / quant.cuh /
// moe.cu run unchanged (with TALLY_EMU defined) on a machine without a GPU.
//
// Found by `#include <cuda_fp16.h>` in common.cuh when this directory comes first on the include
// path and the CUDA headers are absent. Every CUDA thread of a block is a fiber (ucontext) on
// one OS thread; __syncthreads and warp collectives are barriers the scheduler releases once
// every live thread of the block / warp has arrived. Warp collectives (shuffles, match, ldmatrix,
// mma) exchange values through per-warp slots, following the PTX ISA's fragment layouts:
//   ldmatrix .x4: lane l supplies the row address for row l%8 of matrix l/8; lane l receives in
//     register i the 32-bit word (2 halves) at row l/4, halves 2(l%4), 2(l%4)+1 of matrix i.
//   mma m16n8k16 row.col f16: A a0..a3 (f16x2): (row g, k 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
//     (g+8, 2t+8..); B b0, b1: (k 2t..2t+1, col g), (k 2t+8.., col g); C/D c0..c3: (g, 2t),
//     (g, 2t+1), (g+8, 2t), (g+8, 2t+1); g = lane/4, t = lane%4.
// The scheduler visits the fibers in a random order on every pass and lets random warps sit out
// passes, so that a missing barrier has a chance to show up as a wrong result.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "../host_ref.h"

#define TALLY_EMU 1
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))  // GNU form: also after `static`

struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct EmuDim3 { unsigned x = 1, y = 1, z = 1; };
// f16 storage types and the conversions the delta rule kernels use (round to nearest even).
struct __half { unsigned short x; };
struct __half2 { unsigned short x, y; };
inline __half __float2half_rn(float f) { return {ref::hf32_to_f16(f)}; }
inline float __half2float(__half h) { return ref::hf16_to_f32(h.x); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {ref::hf32_to_f16(lo), ref::hf32_to_f16(hi)}; }
inline float2 __half22float2(__half2 h) { return {ref::hf16_to_f32(h.x), ref::hf16_to_f32(h.y)}; }

using std::max;
using std::min;

namespace emu {

constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kDynSmemBytes = 232448;

struct Barrier {
    int expected = 0, arrived = 0;
    unsigned long gen = 0;
};
// A cp.async not yet performed. The emulator copies when the thread waits for its group at the
// latest (as late as the hardware may: reading a slot before waiting sees stale bytes), and at a
// random quarter of the thread's yields before that (as early as it may: a copy issued into a
// slot that other threads still read overwrites it under them).
struct Pending {
    void* dst;
    const void* src;
    unsigned n, src_n, group;
};
inline void land(const Pending& q) {
    std::memcpy(q.dst, q.src, q.src_n);
    std::memset(static_cast<char*>(q.dst) + q.src_n, 0, q.n - q.src_n);
}
// A wgmma not yet performed (the emulator's tensor cores): the thread's two A rows (g, g + 8)
// as the warp supplied them at issue, the B descriptor, and where the accumulators live. It is
// performed when the thread waits for its group at the latest, or at a random earlier point
// (reading the x tile then), like cp.async.
struct PendingMma {
    float* d;
    int n;  // columns (BT)
    double a[2][16];
    uint64_t desc;
    unsigned group;
    int t;  // lane % 4
    bool scale_d = true;  // false: d = A * B (the accumulator's old value ignored)
    uint64_t adesc = 0;   // nonzero: A from shared memory (rows arow, arow + 8), read when performed
    int arow = 0;
};
void land_mma(const PendingMma& q);
struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    bool done = false;
    Barrier* waiting = nullptr;
    unsigned long wait_gen = 0;
    unsigned ops = 0;  // warp collectives issued (selects the exchange slot parity)
    std::vector<Pending> pending;
    unsigned committed = 0;
    std::vector<PendingMma> mmas;
    unsigned mma_committed = 0;
};

struct State {
    EmuDim3 grid, block, block_idx;
    int nthreads = 0, cur = -1;
    Fiber fibers[kMaxThreads];
    Barrier block_bar, warp_bar[kMaxThreads / 32], named_bar[16];
    // mbarriers by shared-window address, with the bulk copies not yet landed.
    struct BulkCopy {
        unsigned dst;
        const void* src;
        unsigned bytes;
    };
    struct Mbar {
        int expected = 0, arrived = 0;
        unsigned phase = 0;
        long long tx = 0;
        std::vector<BulkCopy> copies;
    };
    std::vector<std::pair<unsigned, Mbar>> mbars;
    uint64_t slots[kMaxThreads / 32][2][32][12];
    ucontext_t sched;
    std::function<void()> body;
    std::mt19937 order_rng{12345};
    alignas(1024) unsigned char dyn_smem[kDynSmemBytes];
};
inline State& st() {
    static State* s = new State();
    return *s;
}

inline void release_if_full(Barrier& b) {
    if (b.expected > 0 && b.arrived >= b.expected) {
        b.arrived = 0;
        b.gen++;
    }
}
inline void yield_to_scheduler() {
    State& s = st();
    swapcontext(&s.fibers[s.cur].ctx, &s.sched);
}
inline void wait(Barrier& b) {
    State& s = st();
    Fiber& f = s.fibers[s.cur];
    f.waiting = &b;
    f.wait_gen = b.gen;
    b.arrived++;
    release_if_full(b);
    yield_to_scheduler();
}
inline int tid() { return st().cur; }
inline void syncthreads() { wait(st().block_bar); }
inline void syncwarp() { wait(st().warp_bar[tid() / 32]); }

// Posts n bytes for this lane; after the warp barrier returns the warp's 32 slots.
inline const uint64_t (*exchange(const void* data, size_t n))[12] {
    State& s = st();
    const int t = s.cur, w = t / 32, l = t % 32;
    const unsigned par = s.fibers[t].ops++ & 1u;
    std::memcpy(s.slots[w][par][l], data, n);
    wait(s.warp_bar[w]);
    return s.slots[w][par];
}

inline void fiber_main(int i) {
    State& s = st();
    s.body();
    Fiber& f = s.fibers[i];
    f.done = true;
    // An exited thread no longer takes part in barriers.
    s.block_bar.expected--;
    release_if_full(s.block_bar);
    Barrier& wb = s.warp_bar[i / 32];
    wb.expected--;
    release_if_full(wb);
    swapcontext(&f.ctx, &s.sched);
}

// Runs body once per thread of every block of the grid (blocks one after the other).
inline void launch(EmuDim3 grid, EmuDim3 block, const std::function<void()>& body) {
    State& s = st();
    const int n = int(block.x * block.y * block.z);
    if (n <= 0 || n > kMaxThreads || n % 32 != 0) {
        std::fprintf(stderr, "emu: bad block size %d\n", n);
        std::exit(2);
    }
    s.grid = grid;
    s.block = block;
    s.nthreads = n;
    s.body = body;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                s.block_idx = {bx, by, bz};
                // Fresh shared memory holds garbage: poison it (f16 NaN pattern, f32 NaN).
                std::memset(s.dyn_smem, 0xff, sizeof(s.dyn_smem));
                s.block_bar = Barrier{n, 0, 0};
                for (Barrier& nb : s.named_bar) nb = Barrier{};
                s.mbars.clear();
                for (int w = 0; w < n / 32; w++) s.warp_bar[w] = Barrier{32, 0, 0};
                std::vector<int> order(n);
                for (int i = 0; i < n; i++) {
                    Fiber& f = s.fibers[i];
                    if (!f.stack) f.stack = static_cast<char*>(std::malloc(kStackBytes));
                    f.done = false;
                    f.waiting = nullptr;
                    f.ops = 0;
                    f.pending.clear();
                    f.committed = 0;
                    f.mmas.clear();
                    f.mma_committed = 0;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack;
                    f.ctx.uc_stack.ss_size = kStackBytes;
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, reinterpret_cast<void (*)()>(fiber_main), 1, i);
                    order[i] = i;
                }
                int live = n;
                std::vector<char> skip_warp(size_t(n / 32));
                // One warp of each block is slow: it sits out three passes in four, so that it
                // falls whole phases behind the others (a copy issued into a buffer it still
                // reads, a missing barrier between warpgroups, get their chance to show).
                const size_t slow = size_t(s.order_rng() % unsigned(n / 32));
                while (live > 0) {
                    std::shuffle(order.begin(), order.end(), s.order_rng);
                    // Whole warps sit out a pass at random, so that warps drift apart the way
                    // they do on hardware and a missing barrier gets a chance to show.
                    for (auto& k : skip_warp) k = (s.order_rng() % 3) == 0;
                    if ((s.order_rng() & 3) != 0) skip_warp[slow] = 1;
                    bool progress = false, runnable = false;
                    for (int i : order) {
                        Fiber& f = s.fibers[i];
                        if (f.done) continue;
                        if (f.waiting && f.waiting->gen == f.wait_gen) continue;
                        runnable = true;
                        if (skip_warp[size_t(i / 32)]) continue;
                        f.waiting = nullptr;
                        s.cur = i;
                        swapcontext(&s.sched, &f.ctx);
                        progress = true;
                        if (!f.pending.empty() && (s.order_rng() & 3) == 0) {  // early landing
                            for (const Pending& q : f.pending) land(q);
                            f.pending.clear();
                        }
                        if (!f.mmas.empty() && (s.order_rng() & 3) == 0) {  // early tensor cores
                            for (const PendingMma& q : f.mmas) land_mma(q);
                            f.mmas.clear();
                        }
                        if (f.done) live--;
                    }
                    if (!progress && runnable) continue;
                    if (!progress) {
                        std::fprintf(stderr, "emu: deadlock in block (%u,%u,%u): %d threads wait forever\n", bx, by, bz, live);
                        for (int i = 0; i < n; i += 32) {
                            const Fiber& f = s.fibers[i];
                            if (f.done || !f.waiting) continue;
                            const Barrier* w = f.waiting;
                            const char* what = w == &s.block_bar ? "__syncthreads" : "a warp or named barrier";
                            for (int id = 1; id < 16; id++)
                                if (w == &s.named_bar[id]) what = id == 1 ? "named barrier 1" : "named barrier 2+";
                            std::fprintf(stderr, "  warp %d waits at %s (%d of %d arrived)\n", i / 32, what, w->arrived, w->expected);
                        }
                        std::exit(3);
                    }
                }
                s.cur = -1;
            }
}

}  // namespace emu

struct EmuThreadIdx {
    unsigned x;
};
#define threadIdx (EmuThreadIdx{unsigned(emu::tid())})
#define blockIdx (emu::st().block_idx)
#define blockDim (emu::st().block)
#define gridDim (emu::st().grid)

inline void __syncthreads() { emu::syncthreads(); }
// Named barriers: n threads (all the block's arrivals and waits of one phase) release a phase.
inline emu::Barrier& emu_named_bar(int id, int n) {
    if (id <= 0 || id >= 16 || n <= 0 || n % 32) { std::fprintf(stderr, "emu: bad named barrier %d/%d\n", id, n); std::exit(4); }
    emu::Barrier& b = emu::st().named_bar[id];
    if (b.expected != 0 && b.expected != n) { std::fprintf(stderr, "emu: named barrier %d count changed\n", id); std::exit(4); }
    b.expected = n;
    return b;
}
inline void named_bar_arrive(int id, int n) {
    emu::Barrier& b = emu_named_bar(id, n);
    b.arrived++;
    emu::release_if_full(b);
    emu::yield_to_scheduler();
}
inline void named_bar_sync(int id, int n) { emu::wait(emu_named_bar(id, n)); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
inline float __shfl_xor_sync(unsigned, float v, int m) {
    auto sl = emu::exchange(&v, 4);
    float r;
    std::memcpy(&r, sl[(emu::tid() % 32) ^ m], 4);
    emu::syncwarp();  // nobody rewrites the slot before everyone has read it
    return r;
}
inline int __shfl_xor_sync(unsigned, int v, int m) {
    auto sl = emu::exchange(&v, 4);
    int r;
    std::memcpy(&r, sl[(emu::tid() % 32) ^ m], 4);
    emu::syncwarp();
    return r;
}
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
// int and float (4-byte values).
template <class T>
inline T __shfl_up_sync(unsigned, T v, int d) {
    static_assert(sizeof(T) == 4, "4-byte shuffles only");
    auto sl = emu::exchange(&v, 4);
    const int l = emu::tid() % 32;
    T r = v;
    if (l >= d) std::memcpy(&r, sl[l - d], 4);
    emu::syncwarp();
    return r;
}
// Lane `src`'s value (4-byte values).
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
    static_assert(sizeof(T) == 4, "4-byte shuffles only");
    auto sl = emu::exchange(&v, 4);
    T r;
    std::memcpy(&r, sl[src & 31], 4);
    emu::syncwarp();
    return r;
}
inline unsigned __match_any_sync(unsigned, int key) {
    auto sl = emu::exchange(&key, 4);
    unsigned m = 0;
    for (int l = 0; l < 32; l++) {
        int k;
        std::memcpy(&k, sl[l], 4);
        if (k == key) m |= 1u << l;
    }
    emu::syncwarp();
    return m;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
// Blocks run one after another and a block's threads one at a time: plain accesses are atomic
// and every store is visible to the next block (router.cu's last-block handover).
inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline void __threadfence() {}
template <class T>
inline T __ldcg(const T* p) { return *p; }
// __reduce_max_sync / __reduce_min_sync: the warp's values folded by `pick` (the larger or the
// smaller of two).
template <class Pick>
inline unsigned emu_reduce(unsigned v, unsigned init, Pick pick) {
    auto sl = emu::exchange(&v, 4);
    unsigned m = init;
    for (int l = 0; l < 32; l++) {
        unsigned k;
        std::memcpy(&k, sl[l], 4);
        m = pick(k, m);
    }
    emu::syncwarp();
    return m;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
    return emu_reduce(v, 0u, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
    return emu_reduce(v, ~0u, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) { return ref::bits_f32(u); }
inline float __int_as_float(int i) { return ref::bits_f32(unsigned(i)); }
inline unsigned __float_as_uint(float f) { return ref::f32_bits(f); }
inline float __fmul_rn(float a, float b) { return ref::mul(a, b); }
inline float __fsub_rn(float a, float b) { return ref::sub(a, b); }
inline float __fadd_rn(float a, float b) { return ref::add(a, b); }
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return unsigned(((uint64_t(hi) << 32) | lo) >> (sh & 31));
}

// ---- the primitives quant.cuh / gemm.cu take from the hardware ----------------------------------
#define TALLY_DYNAMIC_SMEM(name) unsigned char* name = emu::st().dyn_smem

inline unsigned ldg_u8(const unsigned char* p) { return p[0]; }
inline unsigned ldg_u16(const unsigned char* p) {
    if (reinterpret_cast<uintptr_t>(p) & 1) { std::fprintf(stderr, "emu: misaligned u16 load\n"); std::exit(4); }
    return p[0] | (p[1] << 8);
}
inline unsigned ldg_u32(const unsigned char* p) {
    if (reinterpret_cast<uintptr_t>(p) & 3) { std::fprintf(stderr, "emu: misaligned u32 load\n"); std::exit(4); }
    unsigned v;
    std::memcpy(&v, p, 4);
    return v;
}
inline uint4 ldg_u128(const unsigned char* p) {
    if (reinterpret_cast<uintptr_t>(p) & 15) { std::fprintf(stderr, "emu: misaligned 16-byte load\n"); std::exit(4); }
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
}
inline float f16_to_f32(unsigned bits) { return ref::hf16_to_f32(uint16_t(bits)); }
inline unsigned f32_to_f16(float x) { return ref::hf32_to_f16(x); }
inline unsigned pack_f16x2(float lo, float hi) { return ref::hf32_to_f16(lo) | (unsigned(ref::hf32_to_f16(hi)) << 16); }
inline double emu_h(unsigned v, int i) { return ref::hf16_to_f64(uint16_t(v >> (16 * i))); }
inline unsigned emu_h2(double lo, double hi) { return ref::hf64_to_f16(lo) | (unsigned(ref::hf64_to_f16(hi)) << 16); }
inline unsigned f16x2_sub(unsigned a, unsigned b) { return emu_h2(emu_h(a, 0) - emu_h(b, 0), emu_h(a, 1) - emu_h(b, 1)); }
inline unsigned f16x2_mul(unsigned a, unsigned b) { return emu_h2(emu_h(a, 0) * emu_h(b, 0), emu_h(a, 1) * emu_h(b, 1)); }
inline unsigned f16x2_fma(unsigned a, unsigned b, unsigned c) {
    return emu_h2(emu_h(a, 0) * emu_h(b, 0) + emu_h(c, 0), emu_h(a, 1) * emu_h(b, 1) + emu_h(c, 1));
}

extern char etext, end;  // linker symbols: end of code, end of the data segment (glibc)
inline void cp_async_push(void* dst, const void* src, unsigned n, unsigned src_n) {
    const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    if ((d % n) || (s % n) || src_n > n) { std::fprintf(stderr, "emu: bad cp.async (%u bytes)\n", n); std::exit(4); }
    // Shared memory here: the dynamic buffer, or a static __shared__ array (a function-local
    // static: the program's data segment, between etext and end; global buffers are on the heap).
    const uintptr_t lo = reinterpret_cast<uintptr_t>(emu::st().dyn_smem);
    const bool dyn = d >= lo && d + n <= lo + emu::kDynSmemBytes;
    const bool stat = d >= reinterpret_cast<uintptr_t>(&etext) && d + n <= reinterpret_cast<uintptr_t>(&end);
    if (!dyn && !stat) { std::fprintf(stderr, "emu: cp.async outside shared memory\n"); std::exit(4); }
    emu::Fiber& f = emu::st().fibers[emu::tid()];
    f.pending.push_back({dst, src, n, src_n, f.committed});
}
inline void cp_async16(void* dst, const void* src) { cp_async_push(dst, src, 16, 16); }
inline void cp_async16z(void* dst, const void* src, unsigned src_bytes) { cp_async_push(dst, src, 16, src_bytes); }
inline void cp_async8(void* dst, const void* src) { cp_async_push(dst, src, 8, 8); }
inline void cp_async4(void* dst, const void* src, unsigned src_bytes) { cp_async_push(dst, src, 4, src_bytes); }
inline void cp_async_commit() { emu::st().fibers[emu::tid()].committed++; }
template <int N>
inline void cp_async_wait() {
    emu::Fiber& f = emu::st().fibers[emu::tid()];
    std::vector<emu::Pending> keep;
    for (const emu::Pending& q : f.pending) {
        if (q.group + N < f.committed) {
            emu::land(q);
        } else {
            keep.push_back(q);
        }
    }
    f.pending.swap(keep);
}

// ldmatrix .x4 (trans: .x4.trans, each 8x8 matrix transposed on the way). Plain: lane l receives in
// register i the halves at row l/4, columns 2(l%4) and 2(l%4)+1, of matrix i; transposed: the halves
// at rows 2(l%4) and 2(l%4)+1, column l/4.
inline void ldsm_x4(const unsigned short* p, unsigned r[4], bool trans = false) {
    if (reinterpret_cast<uintptr_t>(p) & 15) { std::fprintf(stderr, "emu: ldmatrix row not 16-byte aligned\n"); std::exit(4); }
    const uint64_t addr = reinterpret_cast<uintptr_t>(p);
    auto sl = emu::exchange(&addr, 8);
    const int l = emu::tid() % 32;
    auto at = [&](int i, int row, int col) {
        return unsigned(reinterpret_cast<const unsigned short*>(uintptr_t(sl[8 * i + row][0]))[col]);
    };
    for (int i = 0; i < 4; i++) {
        r[i] = trans ? at(i, 2 * (l % 4), l / 4) | (at(i, 2 * (l % 4) + 1, l / 4) << 16)
                     : at(i, l / 4, 2 * (l % 4)) | (at(i, l / 4, 2 * (l % 4) + 1) << 16);
    }
    emu::syncwarp();
}
// stmatrix .x4 .trans: matrix i is held as ldmatrix's fragments (lane l: row l/4, halves 2(l%4),
// 2(l%4)+1, in register i); lane 8i + j gives the address where column j of matrix i goes, as
// 8 contiguous halves (its rows 0..7).
inline void stsm_x4_t(unsigned short* p, const unsigned r[4]) {
    if (reinterpret_cast<uintptr_t>(p) & 15) { std::fprintf(stderr, "emu: stmatrix row not 16-byte aligned\n"); std::exit(4); }
    uint64_t mine[5] = {reinterpret_cast<uintptr_t>(p), r[0], r[1], r[2], r[3]};
    auto sl = emu::exchange(mine, sizeof(mine));
    const int l = emu::tid() % 32, i = l / 8, j = l % 8;
    unsigned short* dst = reinterpret_cast<unsigned short*>(uintptr_t(sl[l][0]));
    for (int row = 0; row < 8; row++) {
        const unsigned w = unsigned(sl[4 * row + j / 2][1 + i]);
        dst[row] = (unsigned short)(w >> (16 * (j % 2)));
    }
    emu::syncwarp();
}
inline void mma_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    uint64_t mine[10];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b0;
    mine[5] = b1;
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        std::memcpy(&u, &c[i], 4);
        mine[6 + i] = u;
    }
    auto sl = emu::exchange(mine, sizeof(mine));
    auto A = [&](int r, int k) {  // element (r, k) of the 16x16 A
        const int lane = (r % 8) * 4 + (k % 8) / 2, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
        return emu_h(unsigned(sl[lane][reg]), k % 2);
    };
    auto B = [&](int k, int n) {  // element (k, n) of the 16x8 B
        const int lane = n * 4 + (k % 8) / 2, reg = 4 + (k >= 8 ? 1 : 0);
        return emu_h(unsigned(sl[lane][reg]), k % 2);
    };
    const int l = emu::tid() % 32, g = l / 4, t = l % 4;
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
        double s = c[i];
        for (int k = 0; k < 16; k++) s += A(r, k) * B(k, n);
        d[i] = float(s);
    }
    emu::syncwarp();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}

// cvt.rna.tf32.f32: the 13 low mantissa bits rounded to nearest, ties away from zero (adding half
// of their weight to the magnitude and clearing them; a carry into the exponent is the right
// rounding up), as a 32-bit pattern. Inputs are finite here.
inline unsigned tf32_of(float x) {
    return (ref::f32_bits(x) + 0x1000u) & 0xFFFFE000u;
}
// mma.sync m16n8k8 row.col f32.tf32.tf32.f32: A a0..a3 = (g, t), (g + 8, t), (g, t + 4),
// (g + 8, t + 4); B b0, b1 = (k t, col g), (k t + 4, col g); C as mma_16816's. The tensor core
// reads only the tf32 bits of each operand (the low 13 are ignored, as here); the products and
// the sum of a k8 step are formed exactly (double) and rounded once into the f32 accumulator.
inline void mma_1688_tf32(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    uint64_t mine[10];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b0;
    mine[5] = b1;
    for (int i = 0; i < 4; i++) mine[6 + i] = ref::f32_bits(c[i]);
    auto sl = emu::exchange(mine, sizeof(mine));
    auto tf = [](uint64_t u) { return double(ref::bits_f32(unsigned(u) & 0xFFFFE000u)); };
    auto A = [&](int r, int k) { return tf(sl[(r % 8) * 4 + k % 4][(r >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]); };
    auto B = [&](int k, int n) { return tf(sl[n * 4 + k % 4][4 + (k >= 4 ? 1 : 0)]); };
    const int l = emu::tid() % 32, g = l / 4, t = l % 4;
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
        double s = 0;
        for (int k = 0; k < 8; k++) s += A(r, k) * B(k, n);
        d[i] = float(double(c[i]) + s);
    }
    emu::syncwarp();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}

// ---- Hopper's warpgroup MMA (gemm_wg.cuh) ------------------------------------------------------
// Shared-window addresses are offsets into the dynamic buffer (itself 1024-byte aligned there).
inline unsigned smem_u32(const void* p) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(emu::st().dyn_smem), q = reinterpret_cast<uintptr_t>(p);
    if (q < lo || q >= lo + emu::kDynSmemBytes) { std::fprintf(stderr, "emu: smem_u32 outside shared memory\n"); std::exit(4); }
    return unsigned(q - lo);
}
inline uint64_t wg_desc(unsigned addr) {
    return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (1ull << 62);
}
inline void wg_fence() {}
// setmaxnreg: a register budget, nothing to model.
template <int N>
inline void setmaxnreg_inc() {}
template <int N>
inline void setmaxnreg_dec() {}
inline void fence_proxy_async() {}
inline void wg_commit() { emu::st().fibers[emu::tid()].mma_committed++; }
// The tensor cores read a wgmma's shared-memory operands at some time between its issue and the
// wait that retires it: the thread yields 0 to 7 times first, so other threads (a bulk copy's
// issuer, a store of the next operands) may run before the operands are read, as on hardware.
template <int N>
inline void wg_wait() {
    if (!emu::st().fibers[emu::tid()].mmas.empty())
        for (int y = int(emu::st().order_rng() % 8); y > 0; y--) emu::yield_to_scheduler();
    emu::Fiber& f = emu::st().fibers[emu::tid()];
    std::vector<emu::PendingMma> keep;
    for (const emu::PendingMma& q : f.mmas) {
        if (q.group + N < f.mma_committed) {
            emu::land_mma(q);
        } else {
            keep.push_back(q);
        }
    }
    f.mmas.swap(keep);
}
// B (16 x n, f16, K-major, 128-byte swizzle) element (k, col) of the descriptor: row col of
// 128 bytes in 8-row groups of 1024 (the stride byte offset), the 16-byte chunk bits [4:6] of the
// address XOR its row bits [7:9].
inline double emu_wg_b(uint64_t desc, int k, int col) {
    const unsigned start = unsigned(desc & 0x3FFFu) << 4, sbo = unsigned((desc >> 32) & 0x3FFFu) << 4;
    if ((desc >> 62) != 1 || sbo != 1024) { std::fprintf(stderr, "emu: unexpected wgmma descriptor\n"); std::exit(4); }
    if ((start & 0x380u) != 0) { std::fprintf(stderr, "emu: wgmma B start not inside the first row of a 1024-byte atom\n"); std::exit(4); }
    const unsigned addr = start + unsigned(col / 8) * 1024u + unsigned(col % 8) * 128u + 2u * unsigned(k);
    const unsigned phys = addr ^ (((addr >> 7) & 7u) << 4);
    if (phys + 2 > emu::kDynSmemBytes) { std::fprintf(stderr, "emu: wgmma B outside shared memory\n"); std::exit(4); }
    uint16_t h;
    std::memcpy(&h, emu::st().dyn_smem + phys, 2);
    return ref::hf16_to_f64(h);
}
inline void emu::land_mma(const emu::PendingMma& q) {
    double a[2][16];
    std::memcpy(a, q.a, sizeof(a));
    if (q.adesc)  // A from shared memory: element (row, k) addressed as B's (k, col)
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 16; k++) a[h][k] = emu_wg_b(q.adesc, k, q.arow + 8 * h);
    for (int j = 0; j < q.n / 8; j++)
        for (int e = 0; e < 4; e++) {
            const int col = 8 * j + 2 * q.t + (e & 1);
            double acc = q.scale_d ? q.d[4 * j + e] : 0.0;
            for (int k = 0; k < 16; k++) acc += a[e >> 1][k] * emu_wg_b(q.desc, k, col);
            q.d[4 * j + e] = float(acc);
        }
}
// mbarriers and bulk copies (wgmma.cuh). A copy lands at issue or when its barrier's phase
// completes (at random: as early or as late as the hardware may), and the phase completes once
// its one arrival came and a thread waits on it; the bytes landed must equal the bytes expected.
inline emu::State::Mbar& emu_mbar(unsigned addr) {
    for (auto& m : emu::st().mbars)
        if (m.first == addr) return m.second;
    std::fprintf(stderr, "emu: mbarrier at %u used before init\n", addr);
    std::exit(4);
}
inline void mbar_init(unsigned addr, unsigned count) {
    if (addr % 8) { std::fprintf(stderr, "emu: misaligned mbarrier\n"); std::exit(4); }
    for (auto& m : emu::st().mbars)
        if (m.first == addr) { m.second = emu::State::Mbar{}; m.second.expected = int(count); return; }
    emu::st().mbars.push_back({addr, emu::State::Mbar{}});
    emu::st().mbars.back().second.expected = int(count);
}
inline void mbar_init_fence() {}
inline void emu_bulk_land(const emu::State::BulkCopy& c) { std::memcpy(emu::st().dyn_smem + c.dst, c.src, c.bytes); }
inline void mbar_expect_tx(unsigned addr, unsigned bytes) {
    emu::State::Mbar& m = emu_mbar(addr);
    m.tx += bytes;
    m.arrived++;
}
inline void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned addr) {
    if ((dst % 16) || (reinterpret_cast<uintptr_t>(src) % 16) || (bytes % 16) || dst + bytes > emu::kDynSmemBytes) {
        std::fprintf(stderr, "emu: bad bulk copy (dst %u, %u bytes)\n", dst, bytes);
        std::exit(4);
    }
    emu::State::Mbar& m = emu_mbar(addr);
    const emu::State::BulkCopy c{dst, src, bytes};
    m.tx -= bytes;
    if (emu::st().order_rng() & 1) emu_bulk_land(c);
    else m.copies.push_back(c);
}
// try_wait.parity p succeeds once the phase of parity p has completed, i.e. while the phase in
// progress (the count of completed ones) has the other parity.
inline void mbar_wait(unsigned addr, unsigned parity) {
    for (;;) {
        emu::State::Mbar& m = emu_mbar(addr);
        if (m.arrived >= m.expected) {
            if (m.tx != 0) { std::fprintf(stderr, "emu: mbarrier phase with %lld bytes expected but not copied\n", m.tx); std::exit(4); }
            for (const auto& c : m.copies) emu_bulk_land(c);
            m.copies.clear();
            m.arrived = 0;
            m.phase++;
        }
        if ((m.phase & 1u) != (parity & 1u)) return;
        emu::yield_to_scheduler();
    }
}

template <int BT>
struct Wgmma {
    // A fragment as mma.m16n8k16's (rows 16w.. of the 64 from warp w): the warp's lanes exchange
    // theirs so each thread keeps its own two rows; the product itself happens later.
    static void mma(float (&d)[BT / 2], const unsigned (&a)[4], uint64_t desc, int scale_d = 1) {
        uint64_t mine[4] = {a[0], a[1], a[2], a[3]};
        auto sl = emu::exchange(mine, sizeof(mine));
        const int l = emu::tid() % 32, g = l / 4;
        emu::PendingMma q{};
        q.d = d;
        q.n = BT;
        q.desc = desc;
        q.t = l % 4;
        q.scale_d = scale_d != 0;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 16; k++) {
                const int r = g + 8 * h, lane = (r % 8) * 4 + (k % 8) / 2, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
                q.a[h][k] = emu_h(unsigned(sl[lane][reg]), k % 2);
            }
        emu::syncwarp();
        emu::Fiber& f = emu::st().fibers[emu::tid()];
        q.group = f.mma_committed;
        f.mmas.push_back(q);
    }
};
// Both operands from shared memory: thread (warp w of the warpgroup, lane g, t) owns rows
// 16 (w % 4) + g and + 8 of the 64, read from the A descriptor when the MMA is performed.
template <int BT>
struct WgmmaSS {
    static void mma(float (&d)[BT / 2], uint64_t adesc, uint64_t bdesc, int scale_d = 1) {
        const int l = emu::tid() % 32;
        emu::PendingMma q{};
        q.d = d;
        q.n = BT;
        q.desc = bdesc;
        q.adesc = adesc;
        q.arow = 16 * ((emu::tid() / 32) % 4) + l / 4;
        q.t = l % 4;
        q.scale_d = scale_d != 0;
        emu::Fiber& f = emu::st().fibers[emu::tid()];
        q.group = f.mma_committed;
        f.mmas.push_back(q);
    }
};
