// Shared definitions for tally's CUDA kernels. Compiled by NVRTC at run time (sm_90a) and by nvcc
// in the lab harnesses; so: no host code, no standard-library headers beyond what NVRTC provides.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Tile, block and shared-memory constants shared with the host (GEMM_BN, DELTA_C, ...) are defined
// once, in crates/engine/src/cuda/consts.rs: NVRTC gets them as -D options (with TALLY_NVRTC);
// nvcc builds (lab harnesses, emulators) read the same values from host_consts.cuh.
#ifndef TALLY_NVRTC
#include "host_consts.cuh"
#endif

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;

// Dynamic shared memory of a kernel (the CPU emulator in lab/gemm/emu defines its own).
#ifndef TALLY_EMU
#define TALLY_DYNAMIC_SMEM(name) extern __shared__ __align__(16) u8 name[]
#endif

#define TALLY_WARP 32
// +infinity without math headers (NVRTC provides no INFINITY macro by default).
#define TALLY_INF __int_as_float(0x7f800000)

// Programmatic dependent launch (Hopper). The host launches every kernel with programmatic
// stream serialization (launch.rs; TALLY_PDL=off turns it off), which lets this grid be
// scheduled before the previous grid in the stream has finished. So every kernel's first
// statement is pdl_enter() or pdl_enter_prefetch(...) (a test checks each __global__ in these
// sources):
//   griddepcontrol.wait blocks until the previous grid has completed and its memory operations
//     are visible, so nothing below it can see a half-written input (a no-op when the launch
//     had no programmatic dependency);
//   griddepcontrol.launch_dependents then lets the next kernel be scheduled; issued after the
//     wait, so at most one grid waits behind a running one (no chain of resident waiters).
// Transitively safe: grid N+1 waits for N, which finished only after it waited for N-1.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A kernel's prefetch hint: up to two byte ranges of global memory it will read.
struct L2Ranges {
    const void* p[2];
    i64 bytes[2];
};

// L2 prefetch of [p, p + bytes), widened to 16-byte bounds: bulk prefetches
// (cp.async.bulk.prefetch.L2, sm_90) of up to 4 KB, chunk i issued by thread i of the block
// (a few instructions per thread; the copy engine streams them). A hint only: no result
// changes, and since L2 is the device's point of coherence a line prefetched before another
// grid stores to it is not stale. TALLY_NO_PREFETCH (TALLY_PREFETCH=off) compiles it away.
__device__ __forceinline__ void l2_prefetch(const void* p, i64 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(TALLY_NO_PREFETCH)
    if (p == nullptr || bytes <= 0) return;
    const u64 lo = reinterpret_cast<u64>(p) & ~15ull;
    const u64 hi = (reinterpret_cast<u64>(p) + static_cast<u64>(bytes) + 15ull) & ~15ull;
    for (u64 a = lo + 4096ull * threadIdx.x; a < hi; a += 4096ull * blockDim.x) {
        const u32 n = static_cast<u32>(hi - a < 4096ull ? hi - a : 4096ull);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
    }
#else
    (void)p;
    (void)bytes;
#endif
}

// pdl_enter() after prefetching r into L2: a kernel whose weights are named by its parameters
// (not by anything an earlier grid writes) starts streaming them while the previous grid still
// runs, so its first loads hit L2. r must be computed from the kernel's parameters only (it is
// evaluated before the wait: no load of device memory may feed it).
__device__ __forceinline__ void pdl_enter_prefetch(const L2Ranges& r) {
    l2_prefetch(r.p[0], r.bytes[0]);
    l2_prefetch(r.p[1], r.bytes[1]);
    pdl_enter();
}

// softplus as the delta gates compute it (elementwise.cu, and delta.cu's fused prologue).
__device__ __forceinline__ float gates_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float tally_silu(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float tally_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// prmt_sx(a, b, c): PTX prmt in its default mode, spelled out because __byte_perm documents only
// the low three bits of each selector nibble: byte i of the result is byte (n & 7) of {b:a}
// (a = bytes 0..3), n = nibble i of c; with bit 3 of n set, that byte's sign bit over all eight
// bits instead (0x00 or 0xff).
// Two-way dot products: c + a.lo16 * b.byte0 + a.hi16 * b.byte1 (dp2a_lo; bytes 2 and 3 for
// dp2a_hi), a two signed 16-bit values, b four unsigned bytes.
#ifdef TALLY_EMU
__device__ __forceinline__ int dp2a_lo(u32 a, u32 b, int c) {
    return c + static_cast<short>(a & 0xffffu) * static_cast<int>(b & 0xffu) +
           static_cast<short>(a >> 16) * static_cast<int>((b >> 8) & 0xffu);
}
__device__ __forceinline__ int dp2a_hi(u32 a, u32 b, int c) { return dp2a_lo(a, b >> 16, c); }
__device__ __forceinline__ u32 prmt_sx(u32 a, u32 b, u32 c) {
    const u64 v = (static_cast<u64>(b) << 32) | a;
    u32 d = 0;
    for (int i = 0; i < 4; i++) {
        const u32 n = (c >> (4 * i)) & 15u, x = static_cast<u32>(v >> (8 * (n & 7u))) & 0xffu;
        d |= ((n & 8u) ? ((x & 0x80u) ? 0xffu : 0u) : x) << (8 * i);
    }
    return d;
}
#else
__device__ __forceinline__ int dp2a_lo(u32 a, u32 b, int c) {
    int d;
    asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int dp2a_hi(u32 a, u32 b, int c) {
    int d;
    asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ u32 prmt_sx(u32 a, u32 b, u32 c) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// 32 warp sums at once: on return, lane l's v[0] is warp_sum of the lanes' v[l], bit for bit (the
// same pairs, lane ^ 16 then ^ 8 ... ^ 1, are added: at each stage a lane keeps half of its values
// and sends its partner the other half). 31 shuffles instead of 32 x 5, and the 16, 8, ... of a
// stage are independent, where 32 warp_sum calls are 32 chains of 5 dependent shuffles.
__device__ __forceinline__ float warp_sum32(float (&v)[32]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int st = 0; st < 5; st++) {
        const int o = 16 >> st;
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (i >= o) break;
            const float send = up ? v[i] : v[i + o];
            const float keep = up ? v[i + o] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    return v[0];
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* shared32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    float t = lane < nw ? shared32[lane] : 0.0f;
    return warp_sum(t);
}
