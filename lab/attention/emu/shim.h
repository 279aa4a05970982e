// A small SIMT emulator, enough to run attention.cu's kernels on the CPU: one fiber per CUDA thread,
// one block at a time. __syncthreads, shuffles, ldmatrix and mma.sync are collectives: a thread
// deposits its operands and yields; the scheduler executes the collective once every lane of the
// warp (or every live thread, for a barrier) has arrived. Runnable threads are picked in random
// order, so races between warps show as wrong results; cp.async either lands at issue or only at
// the wait (two modes), so early reads and late overwrites both show.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
#define __expf expf

struct dim3s { unsigned x, y, z; };

namespace emu {

enum State { RUN, BAR, WOP, DONE };
enum Op { NONE, SHFL, LDSM, LDSMT, MMA };

struct Copy { unsigned char* dst; const unsigned char* src; int bytes; };
struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    unsigned tid;
    State st;
    std::vector<Copy> pending;
};
struct Warp {
    Op op[32];
    float fv[32];
    int xm[32];
    const unsigned char* addr[32];
    unsigned a[32][4], b0[32], b1[32];
    float c[32][4];
    unsigned rout[32][4];
    float fout[32][4];
};

inline std::vector<Fiber> fibers;
inline std::vector<Warp> warps;
inline Fiber* cur = nullptr;
inline ucontext_t sched;
inline dim3s g_block, g_grid, g_bdim;
inline bool g_async_deferred = false;
inline std::mt19937_64 g_rng(12345);
inline void (*g_kern)(void*) = nullptr;
inline void* g_args = nullptr;
inline long long g_collectives = 0;

inline dim3s cur_tid() { return {cur->tid, 0, 0}; }

inline void yield(State s) {
    cur->st = s;
    swapcontext(&cur->ctx, &sched);
}

inline void sync_threads() { yield(BAR); }

inline Warp& my_warp() { return warps[cur->tid >> 5]; }

inline float shfl_xor(float v, int m) {
    Warp& w = my_warp();
    const int l = cur->tid & 31;
    w.op[l] = SHFL;
    w.fv[l] = v;
    w.xm[l] = m;
    yield(WOP);
    return w.fout[l][0];
}

inline void ldmatrix(unsigned (&r)[4], const unsigned char* addr, bool trans) {
    Warp& w = my_warp();
    const int l = cur->tid & 31;
    w.op[l] = trans ? LDSMT : LDSM;
    w.addr[l] = addr;
    yield(WOP);
    for (int j = 0; j < 4; ++j) r[j] = w.rout[l][j];
}

inline void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    Warp& w = my_warp();
    const int l = cur->tid & 31;
    w.op[l] = MMA;
    for (int j = 0; j < 4; ++j) w.a[l][j] = a[j], w.c[l][j] = c[j];
    w.b0[l] = b0;
    w.b1[l] = b1;
    yield(WOP);
    for (int j = 0; j < 4; ++j) c[j] = w.fout[l][j];
}

inline void cp_async(unsigned char* dst, const void* src, int bytes) {
    if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16) {
        std::fprintf(stderr, "emu: misaligned cp.async\n");
        std::abort();
    }
    Copy c{dst, static_cast<const unsigned char*>(src), bytes};
    if (g_async_deferred) {
        cur->pending.push_back(c);
    } else {
        std::memcpy(c.dst, c.src, c.bytes);
        std::memset(c.dst + c.bytes, 0, 16 - c.bytes);
    }
}
inline void cp_async_wait() {
    for (const Copy& c : cur->pending) {
        std::memcpy(c.dst, c.src, c.bytes);
        std::memset(c.dst + c.bytes, 0, 16 - c.bytes);
    }
    cur->pending.clear();
}

inline float h2f(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
inline unsigned short rd16(const unsigned char* p) { unsigned short h; std::memcpy(&h, p, 2); return h; }
inline float lo(unsigned u) { return h2f(u & 0xffff); }
inline float hi(unsigned u) { return h2f(u >> 16); }

[[noreturn]] inline void fail(const char* what, int warp) {
    std::fprintf(stderr, "emu: %s (warp %d, block %u,%u,%u)\n", what, warp, g_block.x, g_block.y, g_block.z);
    std::abort();
}

inline void execute(int wi) {
    Warp& w = warps[wi];
    const Op op = w.op[0];
    for (int l = 1; l < 32; ++l)
        if (w.op[l] != op) fail("lanes of a warp issued different collectives", wi);
    ++g_collectives;
    switch (op) {
        case SHFL:
            for (int l = 0; l < 32; ++l) {
                if (w.xm[l] != w.xm[0]) fail("shuffle lanes disagree on the mask", wi);
                w.fout[l][0] = w.fv[l ^ w.xm[l]];
            }
            break;
        case LDSM:
        case LDSMT:
            for (int l = 0; l < 32; ++l) {
                if (reinterpret_cast<uintptr_t>(w.addr[l]) % 16) fail("ldmatrix row address not 16-byte aligned", wi);
            }
            for (int l = 0; l < 32; ++l) {
                const int g = l >> 2, t = l & 3;
                for (int j = 0; j < 4; ++j) {
                    unsigned short e0, e1;
                    if (op == LDSM) {  // row g, columns 2t, 2t+1 of matrix j
                        e0 = rd16(w.addr[j * 8 + g] + 4 * t);
                        e1 = rd16(w.addr[j * 8 + g] + 4 * t + 2);
                    } else {  // rows 2t, 2t+1, column g of matrix j
                        e0 = rd16(w.addr[j * 8 + 2 * t] + 2 * g);
                        e1 = rd16(w.addr[j * 8 + 2 * t + 1] + 2 * g);
                    }
                    w.rout[l][j] = unsigned(e0) | (unsigned(e1) << 16);
                }
            }
            break;
        case MMA: {
            float A[16][16], B[16][8], C[16][8];
            for (int l = 0; l < 32; ++l) {
                const int g = l >> 2, t = l & 3;
                A[g][2 * t] = lo(w.a[l][0]);
                A[g][2 * t + 1] = hi(w.a[l][0]);
                A[g + 8][2 * t] = lo(w.a[l][1]);
                A[g + 8][2 * t + 1] = hi(w.a[l][1]);
                A[g][2 * t + 8] = lo(w.a[l][2]);
                A[g][2 * t + 9] = hi(w.a[l][2]);
                A[g + 8][2 * t + 8] = lo(w.a[l][3]);
                A[g + 8][2 * t + 9] = hi(w.a[l][3]);
                B[2 * t][g] = lo(w.b0[l]);
                B[2 * t + 1][g] = hi(w.b0[l]);
                B[2 * t + 8][g] = lo(w.b1[l]);
                B[2 * t + 9][g] = hi(w.b1[l]);
                C[g][2 * t] = w.c[l][0];
                C[g][2 * t + 1] = w.c[l][1];
                C[g + 8][2 * t] = w.c[l][2];
                C[g + 8][2 * t + 1] = w.c[l][3];
            }
            for (int i = 0; i < 16; ++i)
                for (int n = 0; n < 8; ++n) {
                    float s = C[i][n];
                    for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][n];
                    C[i][n] = s;
                }
            for (int l = 0; l < 32; ++l) {
                const int g = l >> 2, t = l & 3;
                w.fout[l][0] = C[g][2 * t];
                w.fout[l][1] = C[g][2 * t + 1];
                w.fout[l][2] = C[g + 8][2 * t];
                w.fout[l][3] = C[g + 8][2 * t + 1];
            }
            break;
        }
        default:
            fail("unknown collective", wi);
    }
    for (int l = 0; l < 32; ++l) {
        w.op[l] = NONE;
        fibers[wi * 32 + l].st = RUN;
    }
}

inline void entry() {
    g_kern(g_args);
    if (!cur->pending.empty()) fail("thread exited with cp.async still pending", cur->tid >> 5);
    cur->st = DONE;
    swapcontext(&cur->ctx, &sched);
}

inline void run_block(int nt) {
    if (nt % 32) fail("block size not a multiple of 32", 0);
    fibers.resize(nt);
    warps.assign(nt / 32, Warp{});
    for (int t = 0; t < nt; ++t) {
        Fiber& f = fibers[t];
        f.stack.resize(256 * 1024);
        f.tid = t;
        f.st = RUN;
        f.pending.clear();
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, entry, 0);
    }
    // Per block, either any runnable thread may go next, or one warp keeps running until it blocks
    // at a barrier (the order that exposes a missing barrier between warps).
    const bool sticky = g_rng() % 2;
    int last_warp = -1;
    std::vector<int> runnable;
    for (;;) {
        runnable.clear();
        int done = 0, bar = 0;
        for (int t = 0; t < nt; ++t) {
            if (fibers[t].st == RUN) runnable.push_back(t);
            done += fibers[t].st == DONE;
            bar += fibers[t].st == BAR;
        }
        if (runnable.empty()) {
            if (done == nt) return;
            if (bar + done == nt && bar > 0) {
                if (done > 0) fail("barrier with exited threads in the block", 0);
                for (auto& f : fibers) f.st = RUN;
                continue;
            }
            for (int t = 0; t < nt; ++t)
                std::fprintf(stderr, "thread %d state %d op %d\n", t, fibers[t].st, warps[t >> 5].op[t & 31]);
            fail("deadlock", 0);
        }
        int t = runnable[g_rng() % runnable.size()];
        if (sticky && last_warp >= 0) {
            for (int l = 0; l < 32; ++l) {
                const int c = last_warp * 32 + (int)((l + g_rng()) & 31);
                if (fibers[c].st == RUN) {
                    t = c;
                    break;
                }
            }
        }
        last_warp = t >> 5;
        cur = &fibers[t];
        swapcontext(&sched, &cur->ctx);
        if (cur->st == WOP) {
            const int wi = t >> 5;
            bool all = true;
            for (int l = 0; l < 32; ++l) {
                const State s = fibers[wi * 32 + l].st;
                if (s == DONE || s == BAR) fail("collective while other lanes exited or wait at a barrier", wi);
                all = all && s == WOP;
            }
            if (all) execute(wi);
        }
    }
}

template <class Args>
inline void launch(void (*kern)(Args), dim3s grid, int nt, Args a) {
    // Kernels take their Args by value: run them through a trampoline holding a copy.
    static Args held;
    static void (*real)(Args);
    held = a;
    real = kern;
    g_kern = [](void*) { real(held); };
    g_grid = grid;
    g_bdim = {unsigned(nt), 1, 1};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                g_block = {x, y, z};
                run_block(nt);
            }
}

}  // namespace emu

#define threadIdx (emu::cur_tid())
#define blockIdx (emu::g_block)
#define blockDim (emu::g_bdim)
#define gridDim (emu::g_grid)
#define __syncthreads() emu::sync_threads()
#define __shfl_xor_sync(mask, v, m) emu::shfl_xor((v), (m))
