// Load primitives and byte helpers of the weight front ends (quant.cuh): the hardware loads
// (replaced by the CPU emulator in lab/gemm/emu, which defines TALLY_EMU), 2-byte-aligned
// 16-byte loads for Q6_K / Q8_0 rows, and the cp.async slots the tensor-core GEMM stages through.
#pragma once
#include "common.cuh"

// ---------------------------------------------------------------------------------------------
// Hardware primitives (replaced by the CPU emulator).
#ifndef TALLY_EMU
__device__ __forceinline__ u32 ldg_u8(const u8* p) { return __ldg(p); }
__device__ __forceinline__ u32 ldg_u16(const u8* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ u32 ldg_u32(const u8* p) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
}
__device__ __forceinline__ uint4 ldg_u128(const u8* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ float f16_to_f32(u32 bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}
__device__ __forceinline__ u32 f32_to_f16(float x) { return __half_as_ushort(__float2half_rn(x)); }
// {lo, hi} -> f16x2 (lo in the low half), round to nearest even.
__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u32 f16x2_sub(u32 a, u32 b) {
    u32 r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ u32 f16x2_mul(u32 a, u32 b) {
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ u32 f16x2_fma(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
// Asynchronous global -> shared copies (sm_80+). 16 bytes: both addresses 16-byte aligned. 4
// bytes: both 4-byte aligned; only the first src_bytes (0..4) are read, the rest zero-filled.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const u32 d = static_cast<u32>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// 16 bytes of which only the first src_bytes (0..16) are read, the rest zero-filled; both
// addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16z(void* dst, const void* src, u32 src_bytes) {
    const u32 d = static_cast<u32>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// 8 bytes: both addresses 8-byte aligned.
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
    const u32 d = static_cast<u32>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, u32 src_bytes) {
    const u32 d = static_cast<u32>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

// Where a piece's bytes are read from: `Piece<T>::issue<L>` and the windows below take their
// loads from L. LdG (the default): global memory through the read-only path. LdS: plain loads
// by generic address, for weight bytes a kernel has copied to shared memory unchanged (the
// bulk-fed GEMV, gemm.cu gemvt_body): the same bytes, so the same piece.
struct LdG {
    static __device__ __forceinline__ u32 ld8(const u8* p) { return ldg_u8(p); }
    static __device__ __forceinline__ u32 ld16(const u8* p) { return ldg_u16(p); }
    static __device__ __forceinline__ u32 ld32(const u8* p) { return ldg_u32(p); }
    static __device__ __forceinline__ uint4 ld128(const u8* p) { return ldg_u128(p); }
};
// LdS's loads are ld.shared on the shared-window address: the windows round their addresses
// through integers (Ld16A2, RawBytes), after which the compiler can no longer tell the pointer
// is shared and would emit generic loads. Volatile, so that they stay after the mbarrier wait
// (itself volatile asm) that makes the bytes they read valid.
#ifndef TALLY_EMU
struct LdS {
    static __device__ __forceinline__ u32 sa(const u8* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }
    static __device__ __forceinline__ u32 ld8(const u8* p) {
        unsigned short v;
        asm volatile("ld.shared.u8 %0, [%1];" : "=h"(v) : "r"(sa(p)));
        return v;
    }
    static __device__ __forceinline__ u32 ld16(const u8* p) {
        unsigned short v;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(sa(p)));
        return v;
    }
    static __device__ __forceinline__ u32 ld32(const u8* p) {
        u32 v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(sa(p)));
        return v;
    }
    static __device__ __forceinline__ uint4 ld128(const u8* p) {
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(sa(p)));
        return v;
    }
};
#else
struct LdS {
    static __device__ __forceinline__ u32 ld8(const u8* p) { return *p; }
    static __device__ __forceinline__ u32 ld16(const u8* p) { return *reinterpret_cast<const unsigned short*>(p); }
    static __device__ __forceinline__ u32 ld32(const u8* p) { return *reinterpret_cast<const unsigned int*>(p); }
    static __device__ __forceinline__ uint4 ld128(const u8* p) { return *reinterpret_cast<const uint4*>(p); }
};
#endif

// ---------------------------------------------------------------------------------------------
// Small helpers.

__device__ __forceinline__ float bf16_to_f32(u32 bits) { return __uint_as_float((bits & 0xffffu) << 16); }

// An integer 0 <= v < 2^23 as an exact float, without the quarter-rate I2F: 2^23 + v has v in
// its mantissa.
__device__ __forceinline__ float small_u2f(u32 v) {
    return __fsub_rn(__uint_as_float(0x4B000000u | v), 8388608.0f);
}

// 16 bytes starting at a 2-byte-aligned address, as 4-byte words and one funnel shift each. The
// loads are issued by `issue` and the shifts done by `get`, so that a caller can issue the loads
// of the next tile, compute, and only then touch the data. When p is 2 mod 4, the last word read
// holds 2 bytes past the 16 (every caller has bytes of the same superblock there).
struct Ld16A2 {
    u32 w0, w1, w2, w3, w4, sh;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* p) {
        const u64 a = reinterpret_cast<u64>(p);
        const u8* b = reinterpret_cast<const u8*>(a & ~3ull);
        sh = static_cast<u32>(a & 2u) << 3;  // 0 or 16 bits
        w0 = L::ld32(b);
        w1 = L::ld32(b + 4);
        w2 = L::ld32(b + 8);
        w3 = L::ld32(b + 12);
        w4 = sh ? L::ld32(b + 16) : 0u;
    }
    __device__ __forceinline__ uint4 get() const {
        return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh),
                          __funnelshift_r(w2, w3, sh), __funnelshift_r(w3, w4, sh));
    }
};

// 8 bytes from a 2-byte-aligned address, reading no byte outside them.
__device__ __forceinline__ uint2 ld8_a2(const u8* p) {
    if ((reinterpret_cast<u64>(p) & 2u) == 0) return make_uint2(ldg_u32(p), ldg_u32(p + 4));
    const u32 a = ldg_u16(p), m = ldg_u32(p + 2), b = ldg_u16(p + 6);
    return make_uint2(a | (m << 16), (m >> 16) | (b << 16));
}

// Scale and min (6 bits each) of Q4_K/Q5_K sub-block j (0..7) from the 12 packed bytes, given
// as three little-endian words s0 = bytes 0..3, s1 = 4..7, s2 = 8..11. Sub-blocks 0..3 keep 6
// bits in bytes j and j+4; 4..7 keep their low 4 bits in byte j+4 and their top 2 bits in the
// spare top bits of bytes j-4 (scale) and j (min).
__device__ __forceinline__ void kq_scale_min(u32 s0, u32 s1, u32 s2, int j, u32& sc, u32& m) {
    const int sh = (j & 3) * 8;
    const u32 a = (s0 >> sh) & 0xffu, b = (s1 >> sh) & 0xffu, c = (s2 >> sh) & 0xffu;
    if (j < 4) {
        sc = a & 63u;
        m = b & 63u;
    } else {
        sc = (c & 15u) | ((a >> 6) << 4);
        m = (c >> 4) | ((b >> 6) << 4);
    }
}

// Byte i of a word.
__device__ __forceinline__ u32 byte_of(u32 w, int i) { return (w >> (8 * i)) & 0xffu; }

// A thread's private slot of raw bytes in a shared-memory ring (the GEMM's cp.async stages).
// Word j lives at p + (j/4)*vstride + j%4: the i-th 16-byte vectors of all the threads of a
// block are adjacent (vstride = 4 * threads words), so that 16-byte accesses are conflict-free.
struct Slot {
    u32* p;
    int vstride;
    __device__ __forceinline__ u32* w(int j) const { return p + (j >> 2) * vstride + (j & 3); }
    __device__ __forceinline__ uint4 v(int i) const { return *reinterpret_cast<const uint4*>(p + i * vstride); }
};
// Lane-group sharing in the swapped tiles (gemm.cu swap_issue): the slot of lane u of this lane's
// group of four (this lane is t; slots are 4 words a thread apart).
__device__ __forceinline__ Slot lane_slot(const Slot& s, int u, int t) { return Slot{s.p + 4 * (u - t), s.vstride}; }

// NB bytes at an address p with p % A == 0, staged through a Slot as the 16-byte-aligned vectors
// that cover them: one cp.async per vector, where 4-byte copies would cost one per word (a third
// of the L1 requests for the 2-byte-aligned Q8_0 / Q6_K blocks, whose copies bound the MoE
// tiles). The window starts at p & ~15: the bytes before p are of the same tensor (every device
// tensor starts 16-byte aligned, and earlier rows precede later ones); `issue_async` reads the
// last vector only up to p + NB and zero-fills past it, so no byte past the range is read (for
// `issue`, the direct loads, see there). `from_slot`
// reads the window back (V vectors, conflict-free), `words` gives its words from a dynamic word
// index (three rounds of selects: no local memory), `to_raw` the RawBytes form of the range.
template <int NB>
struct RawBytes;
template <int NB, int A>
struct Win16 {
    static constexpr int V = (16 - A + NB + 15) / 16;  // vectors covering [p & ~15, p + NB)
    static constexpr int SLOT_WORDS = 4 * V;
    u32 w[4 * V];
    u32 r;  // p & 15
    __device__ __forceinline__ static void issue_async(const Slot& s, int j0, const u8* p) {
        const u32 o = static_cast<u32>(reinterpret_cast<u64>(p) & 15u);
        const u8* a = p - o;
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int lim = static_cast<int>(o) + NB - 16 * i;
            cp_async16z(s.w(j0 + 4 * i), lim > 0 ? a + 16 * i : a, static_cast<u32>(lim >= 16 ? 16 : lim > 0 ? lim : 0));
        }
    }
    // The same window by direct 16-byte loads (the GEMV front end: two instead of five to eight
    // narrow loads for a 17- or 18-byte block). A vector holding any byte of the range is read
    // whole, up to 15 bytes past p + NB: every device allocation is whole 16-byte vectors
    // (DevBuf::alloc; the lab's backends likewise, the emulator's ending at a guard page), so
    // those bytes are inside it. Vectors past the range (V is the worst case over p % 16) are
    // zero, not read.
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* p) {
        r = static_cast<u32>(reinterpret_cast<u64>(p) & 15u);
        const u8* a = p - r;
#pragma unroll
        for (int i = 0; i < V; i++) {
            const bool in = 16 * i < static_cast<int>(r) + NB;
            set(i, in ? L::ld128(a + 16 * i) : make_uint4(0u, 0u, 0u, 0u));
        }
    }
    __device__ __forceinline__ void set(int i, uint4 v) {
        w[4 * i] = v.x;
        w[4 * i + 1] = v.y;
        w[4 * i + 2] = v.z;
        w[4 * i + 3] = v.w;
    }
    // j0: a multiple of 4 (whole slot vectors).
    __device__ __forceinline__ void from_slot(const Slot& s, int j0, const u8* p) {
        r = static_cast<u32>(reinterpret_cast<u64>(p) & 15u);
#pragma unroll
        for (int i = 0; i < V; i++) set(i, s.v(j0 / 4 + i));
    }
    // out[i] = window word k + i (zero past the window), for 0 <= k <= KMAX < 8.
    template <int N, int KMAX>
    __device__ __forceinline__ void words(u32 k, u32* out) const {
        constexpr int L = 4 * V + 8;
        u32 t[L];
#pragma unroll
        for (int i = 0; i < L; i++) t[i] = i < 4 * V ? w[i] : 0u;
        if (KMAX >= 4) {
#pragma unroll
            for (int i = 0; i + 4 < L; i++) t[i] = (k & 4u) ? t[i + 4] : t[i];
        }
        if (KMAX >= 2) {
#pragma unroll
            for (int i = 0; i + 2 < L; i++) t[i] = (k & 2u) ? t[i + 2] : t[i];
        }
#pragma unroll
        for (int i = 0; i + 1 < L; i++) t[i] = (k & 1u) ? t[i + 1] : t[i];
#pragma unroll
        for (int i = 0; i < N; i++) out[i] = t[i];
    }
    // A lane group's four consecutive blocks (gemm.cu swap_issue: lane t = 0..3 takes piece
    // 4j + t of one row, here block g0 + t NB): the span [g0, g0 + 4 NB) is copied once, as the
    // GV 16-byte vectors covering it, vector k by lane k % 4 into its slot vector k / 4 (zero
    // past the span, nothing read there); each lane then reads its block's window back from the
    // slots holding its vectors (lane_slot; after the warp has synchronised: swap_decode). The
    // window's vectors past the block hold the next block's bytes or stale ones instead of
    // zeros: to_raw and the pieces read no byte past NB. MXFP4: 80 or 96 bytes a row and K step
    // instead of 128 (68 used); Q8_0 144 or 160 instead of 192 (136).
    static constexpr int GV = (16 - A + 4 * NB + 15) / 16;
    static_assert((GV + 3) / 4 <= V && (((16 - A + 3 * NB) >> 4) + V - 1) / 4 < V,
                  "a lane's slot holds its share of the group's vectors and every vector a window reads");
    __device__ __forceinline__ static void issue_async_group(const Slot& s, const u8* g0, int t) {
        const int o = static_cast<int>(reinterpret_cast<u64>(g0) & 15u);
        const u8* a = g0 - o;
#pragma unroll
        for (int i = 0; i < (GV + 3) / 4; i++) {
            const int k = 4 * i + t, lim = o + 4 * NB - 16 * k;
            cp_async16z(s.w(4 * i), lim > 0 ? a + 16 * k : a, static_cast<u32>(lim >= 16 ? 16 : lim > 0 ? lim : 0));
        }
    }
    __device__ __forceinline__ void from_slot_group(const Slot& s, const u8* g0, int t) {
        const int o = static_cast<int>(reinterpret_cast<u64>(g0) & 15u) + t * NB;  // from the span's first vector
        r = static_cast<u32>(o & 15);
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int k = (o >> 4) + i;
            set(i, lane_slot(s, k & 3, t).v(k >> 2));
        }
    }
    // The range as RawBytes<NB>::issue leaves it (words from p & ~3, off = p & 3).
    __device__ __forceinline__ void to_raw(RawBytes<NB>& rb) const {
        static_assert(RawBytes<NB>::W <= 4 * V, "window");
        words<RawBytes<NB>::W, 3>(r >> 2, rb.w);
        rb.w[RawBytes<NB>::W] = rb.w[RawBytes<NB>::W + 1] = 0u;
        rb.off = r & 3u;
    }
};

// Async form of Ld16A2: five words into slot words j0..j0+4 (the fifth zero-filled, nothing read,
// when p is 4-byte aligned).
__device__ __forceinline__ void ld16a2_async(const Slot& s, int j0, const u8* p) {
    const u64 a = reinterpret_cast<u64>(p);
    const u8* b = reinterpret_cast<const u8*>(a & ~3ull);
    const bool odd = (a & 2u) != 0;
#pragma unroll
    for (int i = 0; i < 4; i++) cp_async4(s.w(j0 + i), b + 4 * i, 4u);
    cp_async4(s.w(j0 + 4), odd ? b + 16 : b, odd ? 4u : 0u);
}
__device__ __forceinline__ void ld16a2_from_slot(Ld16A2& r, const Slot& s, int j0, const u8* p) {
    r.sh = static_cast<u32>(reinterpret_cast<u64>(p) & 2u) << 3;
    r.w0 = *s.w(j0);
    r.w1 = *s.w(j0 + 1);
    r.w2 = *s.w(j0 + 2);
    r.w3 = *s.w(j0 + 3);
    r.w4 = *s.w(j0 + 4);
}
// The aligned word holding the byte at p (every caller's word lies inside the superblock).
__device__ __forceinline__ void byte_word_async(const Slot& s, int j, const u8* p) {
    cp_async4(s.w(j), reinterpret_cast<const u8*>(reinterpret_cast<u64>(p) & ~3ull), 4u);
}
__device__ __forceinline__ u32 byte_from_slot(const Slot& s, int j, const u8* p) {
    return (*s.w(j) >> (8 * (reinterpret_cast<u64>(p) & 3u))) & 0xffu;
}
// The two bytes at a 2-byte-aligned p whose next two bytes may lie past the data: the word
// starting 2 bytes earlier when p is 2 mod 4, else only the 2 bytes themselves.
__device__ __forceinline__ void half_word_async(const Slot& s, int j, const u8* p) {
    const bool odd = (reinterpret_cast<u64>(p) & 2u) != 0;
    cp_async4(s.w(j), odd ? p - 2 : p, odd ? 4u : 2u);
}
__device__ __forceinline__ u32 half_from_slot(const Slot& s, int j, const u8* p) {
    const u32 w = *s.w(j);
    return (reinterpret_cast<u64>(p) & 2u) ? w >> 16 : w & 0xffffu;
}

