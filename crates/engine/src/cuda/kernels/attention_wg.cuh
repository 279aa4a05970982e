#pragma once
// flash_attn_wg_d256: causal prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a), the
// same Op::Attention as attention.cu's kernels (same GQA packing, online softmax and masking;
// its header has the semantics) for head_dim 256, f16 K/V copies made by attn_kv_to_f16.
//
// Why: flash_attn_h_w4_d256 (mma.sync, ldmatrix) ran at ~285 TFLOP/s at 8,192 tokens on an H100
// (1.93 ms a layer, docs/results/2026-12-06-stop44); mma.sync cannot pass ~2/3 of the tensor
// cores' wgmma rate, and at D = 256 every warp re-reads its Q fragments and each K/V element
// through ldmatrix. Here the tensor cores read Q, K and V from shared memory themselves.
//
// Block: 256 threads = 2 warpgroups, BM = 128 packed rows (warpgroup w: rows 64w..64w+63), one
// KV head, all its keys (no key split: the host routes split launches elsewhere). Shared memory
// (wgmma.cuh's K-major 128-byte-swizzled blocks, 1024-byte aligned):
//   Q: D/64 blocks of [128 rows][64 dims], f16, converted from f32 q once;
//   two slots of a K tile, D/64 blocks of [64 keys][64 dims]; three of a V tile transposed,
//   [D dims][64 keys] (rows of 128 bytes), copied from the transposed f16 copy of V (v16 with
//   row stride ldvt: [Hkv * D][ldvt], keys contiguous, zero past the visible keys up to a
//   multiple of 64, written by attn_kv_to_f16 with ldvt > 0), so both MMAs read K-major
//   operands (no transposed descriptor).
// Per 64-key tile t: wait for its cp.async copies, barrier, issue tile t + 1's copies into free
// slots, then per warpgroup: S (64 x 64, f32) = Q K^T as D/16 wgmma m64n64k16 with both
// operands in shared memory; mask, online softmax in registers (the accumulator layout is
// mma.sync's, so P's f16 fragments are the A operand of the next MMA as they stand); O (64 x D,
// f32, D/2 registers a thread) += P V as 4 x D/128 wgmma m64n128k16 with A from registers. One
// barrier a tile, so the two warpgroups drift apart and their MMAs and softmaxes interleave on
// the tensor cores; the copies run a whole tile ahead. (prefill's PIPE has the two forms.)
//
// Launch: grid (ceil(R * H / Hkv / 128), Hkv), 256 threads, ATTN_WG_SMEM_BYTES(256) bytes of
// dynamic shared memory (raise the limit first). Requires n_split <= 1, k16 / v16 16-byte
// aligned, ld16 >= Hkv * D and ldvt >= the visible keys rounded up to 64, both multiples of 8
// (else nothing is written). Precision: f16 operands, f32 accumulation and softmax (as
// flash_attn_h_*).
#include "common.cuh"
#include "quant_load.cuh"
#include "wgmma.cuh"
#include "attention_args.cuh"

#define ATTN_WG_BM 128
#define ATTN_WG_BN 64
// 1024 bytes of alignment slack, the Q tile, two K slots and three transposed V slots (230,400
// bytes at D = 256, of the 232,448 a block may have).
#define ATTN_WG_SMEM_BYTES(D) (1024 + ATTN_WG_BM * (D) * 2 + 5 * ATTN_WG_BN * (D) * 2)

namespace attn_wg {

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

#ifdef TALLY_EMU
inline float ex2(float x) { return exp2f(x); }
#else
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

// Offset of 16-byte chunk c (of 8) of row r inside a [rows][64] swizzled block.
__device__ __forceinline__ u32 swz(int r, int c) { return static_cast<u32>(r * 128 + ((c ^ (r & 7)) << 4)); }

// PIPE false: per tile, S then softmax then P V, each MMA batch waited for before the next step.
// PIPE true: tile t's S = Q K^T and tile t - 1's O += P V issued together, the softmax of S_t
// on the CUDA cores while P V runs on the tensor cores (the rescale of O by tile t's factor
// after P V completes; P packed to f16 after that, the registers P V read). V then stays in
// shared memory one tile longer: K has two slots (tile t & 1), V three (tile t % 3), so tile
// t + 1's copies, issued at the top of iteration t, go where K_{t-1} (its S done in iteration
// t - 1) and V_{t-2} (its P V done in iteration t - 1) were, and one barrier a tile suffices.
template <int D, bool PIPE>
__device__ __forceinline__ void prefill(const AttnArgs& a) {
    constexpr int BM = ATTN_WG_BM, BN = ATTN_WG_BN, NT = 256;
    constexpr int NH = D / 128;  // O halves of 128 columns (one m64n128k16 each)
    constexpr int Q_BYTES = BM * D * 2, K_BYTES = BN * D * 2, V_BYTES = D * BN * 2;
    static_assert(D % 128 == 0, "head dims that are multiples of 128");
    static_assert((BM * D / 8) % NT == 0 && (BN * D / 8) % NT == 0, "copy chunks per thread");
    if (a.d != D || a.R <= 0 || a.Hkv <= 0 || a.H % a.Hkv != 0 || a.n_split > 1 || a.ld16 < static_cast<i64>(a.Hkv) * D ||
        (a.ld16 & 7) != 0 || a.ldvt <= 0 || (a.ldvt & 7) != 0)
        return;
    const int G = a.H / a.Hkv, rows = a.R * G;
    const int nqb = (rows + BM - 1) / BM;
    if (static_cast<int>(blockIdx.x) >= nqb || static_cast<int>(blockIdx.y) >= a.Hkv) return;
    const int qb = nqb - 1 - static_cast<int>(blockIdx.x);  // latest rows (most keys) first
    const int kvh = blockIdx.y;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, gq = lane >> 2, tq = lane & 3;

    TALLY_DYNAMIC_SMEM(smem_raw);
    const u32 raw_u = smem_u32(smem_raw);
    const u32 base_u = (raw_u + 1023u) & ~1023u;
    u8* const sQ = smem_raw + (base_u - raw_u);
    u8* const sK = sQ + Q_BYTES;      // K slot s (of 2) at sK + s * K_BYTES
    u8* const sV = sK + 2 * K_BYTES;  // V slot s (of 3) at sV + s * V_BYTES

    const int row0 = qb * BM;
    const int last = min(row0 + BM, rows) - 1;
    const int kv_end = min(a.P, a.q_offset + last / G + 1);
    const int ntile = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;

    // Causal limits (a padding row borrows the last real row's, as in attention.cu).
    const int wr0 = row0 + 64 * wg;
    const bool wg_rows = wr0 < rows;
    const int wg_hi = a.q_offset + min(wr0 + 63, rows - 1) / G;
    const int ww0 = wr0 + 16 * warp;
    const int w_lo = a.q_offset + min(ww0, rows - 1) / G;
    const int ra = ww0 + gq, rb = ra + 8;
    const int lim_a = a.q_offset + min(ra, rows - 1) / G;
    const int lim_b = a.q_offset + min(rb, rows - 1) / G;
    const float cs = a.scale * 1.4426950408889634f;

    // Q -> f16, swizzled (published by the first barrier): chunk i = 8 dims of one packed row.
    {
        const bool qv = ((reinterpret_cast<u64>(a.q) | static_cast<u64>(a.ldq * 4)) & 15u) == 0;
#pragma unroll 4
        for (int j = 0; j < BM * D / 8 / NT; ++j) {
            const int i = tid + NT * j, r = i / (D / 8), c = i % (D / 8), idx = row0 + r;
            float x[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) x[e] = 0.f;
            if (idx < rows) {
                const float* src = a.q + static_cast<i64>(idx / G) * a.ldq + static_cast<i64>(kvh * G + idx % G) * D + 8 * c;
                if (qv) {
                    const float4 x0 = *reinterpret_cast<const float4*>(src), x1 = *reinterpret_cast<const float4*>(src + 4);
                    x[0] = x0.x, x[1] = x0.y, x[2] = x0.z, x[3] = x0.w, x[4] = x1.x, x[5] = x1.y, x[6] = x1.z, x[7] = x1.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e) x[e] = src[e];
                }
            }
            *reinterpret_cast<uint4*>(sQ + (c >> 3) * (BM * 128) + swz(r, c & 7)) =
                make_uint4(pack_f16x2(x[0], x[1]), pack_f16x2(x[2], x[3]), pack_f16x2(x[4], x[5]), pack_f16x2(x[6], x[7]));
        }
    }

    const __half* gk = a.k16 + static_cast<i64>(kvh) * D;
    const __half* gv = a.v16 + static_cast<i64>(kvh) * D * a.ldvt;
    // Tile t's K rows into K slot t & 1 (keys past kv_end zero-filled, never read past the copy).
    auto issue_k = [&](int t) {
        const int k0 = t * BN;
        u8* sk = sK + (t & 1) * K_BYTES;
#pragma unroll
        for (int j = 0; j < BN * D / 8 / NT; ++j) {
            const int i = tid + NT * j, r = i / (D / 8), c = i % (D / 8);
            const bool ok = k0 + r < kv_end;
            cp_async16z(sk + (c >> 3) * (BN * 128) + swz(r, c & 7), ok ? gk + static_cast<i64>(k0 + r) * a.ld16 + 8 * c : gk,
                        ok ? 16u : 0u);
        }
    };
    // Tile t's transposed V rows into V slot t % 3 (the copy is zero past the visible keys up to
    // a multiple of 64).
    auto issue_v = [&](int t) {
        const int k0 = t * BN;
        u8* sv = sV + (t % 3) * V_BYTES;
#pragma unroll
        for (int j = 0; j < D * BN / 8 / NT; ++j) {
            const int i = tid + NT * j, r = i >> 3, c = i & 7;
            cp_async16(sv + swz(r, c), gv + static_cast<i64>(r) * a.ldvt + k0 + 8 * c);
        }
    };

    float o[NH][64];
#pragma unroll
    for (int hf = 0; hf < NH; ++hf)
#pragma unroll
        for (int i = 0; i < 64; ++i) o[hf][i] = 0.f;
    float m_a = neg_inf(), m_b = neg_inf(), l_a = 0.f, l_b = 0.f;
    float s[32];
    u32 p[BN / 16][4];
    const u32 q_u = smem_u32(sQ) + static_cast<u32>(wg * 64 * 128);
    const u32 k_u = smem_u32(sK), v_u = smem_u32(sV);

    // S (64 x BN, f32) = Q K^T of tile t (not waited for).
    auto s_gemm = [&](int t) {
        const u32 kt = k_u + static_cast<u32>((t & 1) * K_BYTES);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            WgmmaSS<64>::mma(s, wg_desc(q_u + (kk >> 2) * (BM * 128) + 32 * (kk & 3)),
                             wg_desc(kt + (kk >> 2) * (BN * 128) + 32 * (kk & 3)), kk > 0 ? 1 : 0);
        }
        wg_commit();
    };
    // O += P V of tile t (P in registers; not waited for).
    auto pv_gemm = [&](int t) {
        const u32 vt = v_u + static_cast<u32>((t % 3) * V_BYTES);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int hf = 0; hf < NH; ++hf) Wgmma<128>::mma(o[hf], p[kk], wg_desc(vt + hf * (128 * 128) + 32 * kk), 1);
        wg_commit();
    };
    // Mask and exponentiate S of the tile at k0 in place; the new maxima; the factors al_a / al_b
    // that rescale O and l (applied by the caller).
    float al_a = 1.f, al_b = 1.f;
    auto softmax = [&](int k0) {
        // s[4j + e]: row gq + 8 (e >> 1) of this warp's 16, key k0 + 8j + 2tq + (e & 1).
        if (k0 + BN - 1 > w_lo) {  // some key of this tile is after some row of this warp
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int key = k0 + 8 * j + 2 * tq;
                if (key > lim_a) s[4 * j] = neg_inf();
                if (key + 1 > lim_a) s[4 * j + 1] = neg_inf();
                if (key > lim_b) s[4 * j + 2] = neg_inf();
                if (key + 1 > lim_b) s[4 * j + 3] = neg_inf();
            }
        }
        float mx_a = neg_inf(), mx_b = neg_inf();
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            mx_a = fmaxf(mx_a, fmaxf(s[4 * j], s[4 * j + 1]));
            mx_b = fmaxf(mx_b, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
        float nb_a, nb_b;
        attn_softmax_step(mx_a, mx_b, cs, [](float x) { return ex2(x); }, m_a, m_b, al_a, al_b, nb_a, nb_b);
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            s[4 * j] = ex2(fmaf(s[4 * j], cs, nb_a));
            s[4 * j + 1] = ex2(fmaf(s[4 * j + 1], cs, nb_a));
            s[4 * j + 2] = ex2(fmaf(s[4 * j + 2], cs, nb_b));
            s[4 * j + 3] = ex2(fmaf(s[4 * j + 3], cs, nb_b));
            sum_a += s[4 * j] + s[4 * j + 1];
            sum_b += s[4 * j + 2] + s[4 * j + 3];
        }
        l_a = l_a * al_a + sum_a;  // per-thread partial sums: the quad is reduced once at the end
        l_b = l_b * al_b + sum_b;
    };
    auto rescale = [&]() {
#pragma unroll
        for (int hf = 0; hf < NH; ++hf)
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                o[hf][4 * j] *= al_a;
                o[hf][4 * j + 1] *= al_a;
                o[hf][4 * j + 2] *= al_b;
                o[hf][4 * j + 3] *= al_b;
            }
    };
    // P's A fragments of key slice kk: (row g, keys 2t..), (g + 8, 2t..), (g, 8 + 2t..), (g + 8, 8 + 2t..).
    auto pack_p = [&]() {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            p[kk][0] = pack_f16x2(s[8 * kk], s[8 * kk + 1]);
            p[kk][1] = pack_f16x2(s[8 * kk + 2], s[8 * kk + 3]);
            p[kk][2] = pack_f16x2(s[8 * kk + 4], s[8 * kk + 5]);
            p[kk][3] = pack_f16x2(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };

    if (ntile > 0) {
        issue_k(0);
        issue_v(0);
        cp_async_commit();
    }
    if constexpr (!PIPE) {
        for (int t = 0; t < ntile; ++t) {
            cp_async_wait<0>();
            fence_proxy_async();  // cp.async writes are generic-proxy; the tensor cores read async-proxy
            __syncthreads();      // tile t visible to all; every MMA of tile t - 1 is done
            if (t + 1 < ntile) {
                issue_k(t + 1);
                issue_v(t + 1);
                cp_async_commit();
            }
            if (!wg_rows || t * BN > wg_hi) continue;  // warpgroup-uniform: no row of it sees this tile
            wg_fence();
            s_gemm(t);
            wg_wait<0>();
            softmax(t * BN);
            rescale();
            pack_p();
            wg_fence();
            pv_gemm(t);
            wg_wait<0>();
        }
    } else {
        // Tiles this warpgroup's rows see (warpgroup-uniform; a prefix of the block's tiles).
        // The MMA steps are peeled so that no wgmma issue or wait sits on a conditional path:
        // ptxas serialises every wgmma of a kernel whose waits it finds in divergent code.
        const int n_act = wg_rows ? min(ntile, max(0, wg_hi / BN + 1)) : 0;
        auto top = [&](int t) {
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();  // tile t visible to all; every S of t - 1 and P V of t - 2 is done
            if (t + 1 < ntile) {
                issue_k(t + 1);
                issue_v(t + 1);
                cp_async_commit();
            }
        };
        if (n_act > 0) {
            top(0);
            wg_fence();
            s_gemm(0);
            wg_wait<0>();
            softmax(0);
            pack_p();  // O is still zero: nothing to rescale
            for (int t = 1; t < n_act; ++t) {
                top(t);
                wg_fence();
                s_gemm(t);
                pv_gemm(t - 1);
                wg_wait<1>();  // S_t done; the P V of tile t - 1 may run on
                softmax(t * BN);
                wg_wait<0>();
                rescale();
                pack_p();
            }
            // The last seen tile's V landed and was published at its top; its slot is rewritten
            // two tops later, after this wait.
            wg_fence();
            pv_gemm(n_act - 1);
            wg_wait<0>();
        }
        for (int t = n_act; t < ntile; ++t) top(t);  // the other warpgroup's tiles: copies only
    }

    // Epilogue: quad-reduce the sums, normalise, write o.
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    if (!wg_rows) return;
    const bool vec = ((reinterpret_cast<u64>(a.o) | static_cast<u64>(a.ldo * 4)) & 7u) == 0;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int idx = hr ? rb : ra;
        if (idx >= rows) continue;
        const float l = hr ? l_b : l_a;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        float* dst = a.o + static_cast<i64>(idx / G) * a.ldo + static_cast<i64>(kvh * G + idx % G) * D;
#pragma unroll
        for (int hf = 0; hf < NH; ++hf)
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float x0 = o[hf][4 * j + 2 * hr] * inv, x1 = o[hf][4 * j + 2 * hr + 1] * inv;
                float* d2 = dst + hf * 128 + 8 * j + 2 * tq;
                if (vec) {
                    *reinterpret_cast<float2*>(d2) = make_float2(x0, x1);
                } else {
                    d2[0] = x0;
                    d2[1] = x1;
                }
            }
    }
}

}  // namespace attn_wg

// The engine's kernel is the serial form (measured faster on an H100: 401 against 356 TFLOP/s at
// pp8192 for the pipelined form with two barriers a tile, docs/results/2026-12-06-stop45);
// TALLY_ATTN_WG_PIPE (TALLY_ATTN=wg-pipe) builds the pipelined one instead (the lab has both,
// lab/attention/variants.cu).
#ifdef TALLY_ATTN_WG_PIPE
#define ATTN_WG_PIPE true
#else
#define ATTN_WG_PIPE false
#endif
// An entry point of one form (the lab's variants.cu defines the other's with it).
#define ATTN_WG_KERNEL(NAME, PIPE)                                                    \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME(AttnArgs a) {          \
        pdl_enter();                                                                  \
        if (a.pos) a.q_offset += *a.pos;                                              \
        attn_wg::prefill<256, PIPE>(a);                                               \
    }
#ifndef TALLY_EMU
ATTN_WG_KERNEL(flash_attn_wg_d256, ATTN_WG_PIPE)
#endif
