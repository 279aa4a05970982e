// Causal softmax attention with grouped KV heads: Op::Attention (crates/model/src/plan.rs), whose
// reference is crates/engine/src/cpu/ops/attention.rs.
//
// Query row r (position p = q_offset + *pos + r; pos the batch position, device data, so one captured
// graph serves every decode step) attends to cache rows 0..=p; query head h reads KV head
// h / (H / Hkv). o = softmax(scale * q k^T) v per (row, head), never materialising the scores:
// flash attention with an online softmax (f32 maximum and sum), f16 mma.sync m16n8k16 operands and
// f32 accumulation. Inputs and outputs are f32.
//
// Kernels (D = head_dim in {32, 64, 128, 256}; every kernel takes one AttnArgs by value):
//   flash_attn_d{D}      prefill, 128-row tiles (8 warps), f32 K/V converted to f16 as they load.
//   flash_attn_h_w4_d{D} prefill, 64-row tiles (4 warps, two blocks an SM), K/V read as f16 from the
//                        copies at AttnArgs.k16 / v16 (cp.async, 64-key tiles).
//   attn_kv_to_f16       writes those copies: the first min(P, q_offset + R) cache rows, as f16
//                        (V transposed for flash_attn_wg_d256 when ldvt > 0).
//   flash_attn_wg_d256   prefill on wgmma, 128-row tiles (2 warpgroups), f16 K and transposed V
//                        (attention_wg.cuh, which has its own launch rules).
//   flash_decode_d{D}    R * (H / Hkv) <= 8 (decode, last token only): f32 CUDA-core flash decoding.
//   flash_attn_combine   merges split partials (n_split > 1) into o.
// Variants of the same templates that the engine does not load live in lab/attention/variants.cu:
//   flash_attn_w4_d{D}   f32 K/V with 64-row tiles (4 warps; two blocks fit on one SM).
//   flash_attn_h_d{D}    f16 K/V with 128-row tiles.
// The f16 pair is the same arithmetic as flash_attn_d{D} (the f32 kernel rounds K and V to f16 as
// it stages them; the copy rounds them once, the same way), in tiles of 64 keys instead of 32 at
// D = 256: it ran 1.5x faster at the real shape and pp8192, conversion included, with the same
// error (docs/results/2026-12-04-h200-decode-attn/lab-attn_bench-timing.txt).
//
// GQA packing: the G = H / Hkv query heads that share one KV head are packed into the rows of one
// tile (packed row i = query row i / G, head kvh * G + i % G), so every K/V tile that a block loads
// serves all G heads (8 for the model) instead of one.
//
// Launch rules (host):
//   G = H / Hkv, rows = R * G, P_vis = q_offset + R (<= P), BM = 128 (flash_attn_*) or 64 (*_w4_*).
//   flash_attn_*:  grid (ceil(rows / BM), Hkv, n_split), block 2 * BM threads, dynamic shared memory
//                  ATTN_SMEM_BYTES(D, BM / 16, is_h) bytes, raised once per kernel with
//                  cudaFuncAttributeMaxDynamicSharedMemorySize where over 48 KB. In bytes, for D = 32/64/128/256:
//                    flash_attn_d*  20480 36864 69632 101376    flash_attn_w4_d*   15360 27648 34816  50688
//                    flash_attn_h_d* 20480 36864 69632 135168   flash_attn_h_w4_d* 15360 27648 52224 101376
//                  Blocks run the latest query rows (the most keys) first.
//   flash_decode_*: only when rows <= 8; grid (n_split, Hkv), block 256, static shared memory.
//   flash_attn_combine: after either, only when 1 < n_split <= ATTN_COMBINE_MAX_SPLITS; grid R * H,
//                  block ATTN_COMBINE_THREADS (d / 4 <= ATTN_COMBINE_THREADS).
//   attn_kv_to_f16: before flash_attn_h_*; grid (any x, 2), block 256: the blocks of x stride over the
//                  min(P, P_vis) * Hkv * d / 8 chunks of 8 values (grid.y 0: K, 1: V).
//   Grids may be larger than needed (extra blocks exit), except grid.z / grid.x of the split kernels,
//   which must equal n_split exactly when n_split > 1 (the combine reads every split).
// Split rule (what lab/attention/bench.cu implements; any n_split >= 1 and kv_chunk >= 1 are correct):
//   key split z covers keys [z * chunk, (z + 1) * chunk) with chunk = kv_chunk rounded up to 64; the
//   last split also takes every key after that. Suggested: decode: target = SMs * blocks_per_SM / Hkv,
//   kv_chunk = ceil(P_vis / target) rounded up to 64, n_split = ceil(P_vis / kv_chunk); prefill: split
//   only when ceil(rows / BM) * Hkv * 4 < SMs, the same way with target = SMs / (ceil(rows / BM) * Hkv).
// Workspace (n_split > 1 only): ws = n_split * R * H * (d + 2) floats: partial outputs
//   [n_split][R][H][d] (each normalised by its own sum), then (max * scale * log2 e, sum) pairs
//   [n_split][R][H][2]. f16 copies for flash_attn_h_*: k16 and v16, at least min(P, P_vis) rows of
//   ld16 halves (ld16 >= Hkv * d, a multiple of 8; 16-byte aligned), written by attn_kv_to_f16.
// Requirements: scale > 0; |q|, |k|, |v| < 65504 (f16 range); o does not alias q, k, v or ws.
// 16-byte aligned pointers with ld a multiple of 4 take vector loads, anything else a scalar path;
// A kernel whose D differs from d, or with H % Hkv != 0, writes nothing.
#include "common.cuh"

#include "attention_args.cuh"

// The f16 copies as the prefill template reads them (KV16 = true; the f32 kernels get an empty
// one): [>= P_vis, ld] each, 16-byte aligned, ld a multiple of 8.
struct AttnKv16 {
    __half* k;
    __half* v;
    i64 ld;
};

// Dynamic shared memory of flash_attn_*: (BM + 2 * BN) rows of (D + 8) halves.
#define ATTN_BN_F32(D, NW) ((1024 * (NW) / (D)) < 64 ? (1024 * (NW) / (D)) : 64)
#define ATTN_SMEM_BYTES(D, NW, KV16) ((16 * (NW) + 2 * ((KV16) ? 64 : ATTN_BN_F32(D, NW))) * ((D) + 8) * 2)

extern __shared__ __align__(16) unsigned char attn_smem[];

namespace attn {

#define ATTN_LOG2E 1.4426950408889634f

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<u32*>(&h);
}

__device__ __forceinline__ bool aligned(const void* p, i64 ld, int bytes) {
    return ((reinterpret_cast<unsigned long long>(p) | static_cast<unsigned long long>(ld * 4)) &
            static_cast<unsigned long long>(bytes - 1)) == 0;
}

__device__ __forceinline__ float4 ld4(const float* p, bool vec) {
    if (vec) return __ldg(reinterpret_cast<const float4*>(p));
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

__device__ __forceinline__ void st_h4(__half* s, float4 x) {
    uint2 u;
    u.x = pack_h2(x.x, x.y);
    u.y = pack_h2(x.z, x.w);
    *reinterpret_cast<uint2*>(s) = u;
}

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c (16x8 f32) += a (16x16 f16, row) * b (16x8 f16, col).
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared; src_bytes 0 fills zeros and reads nothing.
__device__ __forceinline__ void cp_async16(u32 saddr, const void* g, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Keys [kb, ke) of split z for a block whose rows see keys < kv_end.
__device__ __forceinline__ void split_range(const AttnArgs& a, int n_split, int z, int kv_end, int& kb, int& ke) {
    if (n_split <= 1) {
        kb = 0;
        ke = kv_end;
        return;
    }
    // kv_chunk < 1: from the visible keys (the position is device data: a grid fixed at capture
    // splits whatever length the cache has reached evenly).
    i64 chunk = a.kv_chunk >= 1 ? a.kv_chunk : (static_cast<i64>(kv_end) + n_split - 1) / n_split;
    chunk = chunk < 1 ? 1 : chunk;
    chunk = (chunk + 63) & ~static_cast<i64>(63);
    const i64 b = static_cast<i64>(z) * chunk;
    kb = static_cast<int>(b < kv_end ? b : kv_end);
    const i64 e = b + chunk;
    ke = (z == n_split - 1 || e > kv_end) ? kv_end : static_cast<int>(e);
}

// Where split z's partial for (query row r, head h) lives; the (max, sum) pairs follow the outputs.
__device__ __forceinline__ float* part_o(const AttnArgs& a, int n_split, int z, int r, int h) {
    return a.ws + ((static_cast<i64>(z) * a.R + r) * a.H + h) * a.d;
}
__device__ __forceinline__ float2* part_ml(const AttnArgs& a, int n_split, int z, int r, int h) {
    float2* base = reinterpret_cast<float2*>(a.ws + static_cast<i64>(n_split) * a.R * a.H * a.d);
    return base + (static_cast<i64>(z) * a.R + r) * a.H + h;
}

// ---------------------------------------------------------------------------------------------
// Prefill: one block = BM packed rows of one KV head against the keys [kb, ke) of one split.
// Warp w owns packed rows 16w..16w+15 (one m16 tile); the block walks BN-key tiles:
//   sync A (K tile in shared) -> S = Q K^T -> online softmax -> sync B (V tile in shared) -> O += P V,
// loading V during S and the next K during P V (registers for f32 inputs, cp.async for f16 ones).

template <int D, int NW, bool KV16>
struct Cfg {
    static constexpr int BM = 16 * NW;
    static constexpr int NT = 32 * NW;
    // f32 staging holds one K or V tile in registers: BN * D / NT floats, at most 32 per thread.
    static constexpr int BN = KV16 ? 64 : ATTN_BN_F32(D, NW);
    static constexpr int LDS = D + 8;  // shared row stride in halves: +16 B puts the 8 rows of an ldmatrix on distinct banks
    static constexpr int SMEM = ATTN_SMEM_BYTES(D, NW, KV16);
    static_assert(BN % 16 == 0 && 64 % BN == 0, "tiles must align with the 64-key split chunks");
    static_assert((BN * D / 4) % NT == 0 && (BN * D / 8) % NT == 0 && (BM * D / 4) % NT == 0, "tile/thread mismatch");
    static_assert(SMEM == (BM + 2 * BN) * LDS * 2, "smem formula");
};

template <int D, int NW, bool KV16>
__device__ __forceinline__ void prefill(const AttnArgs& a, const AttnKv16& kv16) {
    using C = Cfg<D, NW, KV16>;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT, LDS = C::LDS;
    constexpr int NF4 = BN * D / 4 / NT;  // f32 staging: float4 per thread per tile
    constexpr int NC16 = BN * D / 8 / NT; // f16 path: 16-byte chunks per thread per tile
    constexpr int NDT = D / 8;            // output n-tiles per warp
    constexpr int NST = BN / 8;           // score n-tiles per warp

    if (a.d != D || a.R <= 0 || a.Hkv <= 0 || a.H % a.Hkv != 0) return;
    const int G = a.H / a.Hkv, rows = a.R * G;
    const int nqb = (rows + BM - 1) / BM;
    const int n_split = a.n_split > 1 ? a.n_split : 1;
    if (static_cast<int>(blockIdx.x) >= nqb || static_cast<int>(blockIdx.y) >= a.Hkv ||
        static_cast<int>(blockIdx.z) >= n_split)
        return;
    const int qb = nqb - 1 - static_cast<int>(blockIdx.x);  // latest rows (most keys) first
    const int kvh = blockIdx.y, z = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;

    __half* sQ = reinterpret_cast<__half*>(attn_smem);
    __half* sK = sQ + BM * LDS;
    __half* sV = sK + BN * LDS;

    const int row0 = qb * BM;
    const int last = min(row0 + BM, rows) - 1;
    const int kv_end = min(a.P, a.q_offset + last / G + 1);
    int kb, ke;
    split_range(a, n_split, z, kv_end, kb, ke);
    const int ntile = ke > kb ? (ke - kb + BN - 1) / BN : 0;

    // Causal limits: a padding row (packed index >= rows) borrows the last real row's limit, so it
    // computes finite values on zero queries and is never written.
    const int wr0 = row0 + warp * 16;
    const bool w_rows = wr0 < rows;
    const int w_lo = a.q_offset + min(wr0, rows - 1) / G;
    const int w_hi = a.q_offset + min(wr0 + 15, rows - 1) / G;
    const int ra = wr0 + gq, rb = ra + 8;
    const int lim_a = a.q_offset + min(ra, rows - 1) / G;
    const int lim_b = a.q_offset + min(rb, rows - 1) / G;
    const float cs = a.scale * ATTN_LOG2E;

    // Q tile -> f16 shared (published by the first sync A).
    {
        const bool qv = aligned(a.q, a.ldq, 16);
#pragma unroll 4
        for (int i = tid; i < BM * D / 4; i += NT) {
            const int r = i / (D / 4), c = (i % (D / 4)) * 4, idx = row0 + r;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (idx < rows) {
                const int pos = idx / G, h = kvh * G + idx % G;
                x = ld4(a.q + static_cast<i64>(pos) * a.ldq + static_cast<i64>(h) * D + c, qv);
            }
            st_h4(sQ + r * LDS + c, x);
        }
    }

    const float* gk = a.k + static_cast<i64>(kvh) * D;
    const float* gv = a.v + static_cast<i64>(kvh) * D;
    const bool kv_vec = aligned(a.k, a.ldk, 16), vv_vec = aligned(a.v, a.ldv, 16);
    const __half* gk16 = kv16.k + static_cast<i64>(kvh) * D;
    const __half* gv16 = kv16.v + static_cast<i64>(kvh) * D;

    // Thread tid moves columns c_f32 (or c_f16) of tile rows r_f32 + j * RS_F32 (or r_f16 + j * RS_F16):
    // one base pointer per tile and compile-time steps keep the staging addressing out of the registers.
    constexpr int RS_F32 = NT / (D / 4), RS_F16 = NT / (D / 8);
    static_assert(NT % (D / 4) == 0 && NT % (D / 8) == 0, "rows per pass");
    const int r_f32 = tid / (D / 4), c_f32 = (tid % (D / 4)) * 4;
    const int r_f16 = tid / (D / 8), c_f16 = (tid % (D / 8)) * 8;
    float4 stg[NF4];
    auto load_f32 = [&](const float* g, i64 ld, bool vec, int key0) {
        const int key = key0 + r_f32;
        const float* src = g + static_cast<i64>(key) * ld + c_f32;
        const i64 step = static_cast<i64>(RS_F32) * ld;
#pragma unroll
        for (int j = 0; j < NF4; ++j) {
            stg[j] = key + j * RS_F32 < ke ? ld4(src + j * step, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    auto store_f32 = [&](__half* s) {
        __half* dst = s + r_f32 * LDS + c_f32;
#pragma unroll
        for (int j = 0; j < NF4; ++j) st_h4(dst + j * RS_F32 * LDS, stg[j]);
    };
    auto issue_f16 = [&](const __half* g, __half* s, int key0) {
        const int key = key0 + r_f16;
        const __half* src = g + static_cast<i64>(key) * kv16.ld + c_f16;
        const i64 step = static_cast<i64>(RS_F16) * kv16.ld;
        const u32 dst = smem_u32(s + r_f16 * LDS + c_f16);
#pragma unroll
        for (int j = 0; j < NC16; ++j) {
            const bool ok = key + j * RS_F16 < ke;
            cp_async16(dst + j * RS_F16 * LDS * 2, ok ? src + j * step : g, ok ? 16 : 0);
        }
        cp_async_commit();
    };

    // ldmatrix lane offsets (halves). A (Q, rows x dims): matrices (r0-7,c0-7) (r8-15,c0-7) (r0-7,c8-15)
    // (r8-15,c8-15). B from K (keys x dims): (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15).
    // B from V transposed (keys x dims): (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15).
    const int off_a = ((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + (lane >> 4) * 8;
    const int off_k = ((lane & 7) + (lane >> 4) * 8) * LDS + ((lane >> 3) & 1) * 8;
    const u32 aQ = smem_u32(sQ + warp * 16 * LDS + off_a);
    const u32 aK = smem_u32(sK + off_k);
    const u32 aV = smem_u32(sV + off_a);

    float o[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_a = neg_inf(), m_b = neg_inf(), l_a = 0.f, l_b = 0.f;

    if (ntile > 0) {
        if constexpr (KV16) {
            issue_f16(gk16, sK, kb);
        } else {
            load_f32(gk, a.ldk, kv_vec, kb);
            store_f32(sK);
        }
    }

    for (int t = 0; t < ntile; ++t) {
        const int k0 = kb + t * BN;
        const bool has_next = t + 1 < ntile;
        if constexpr (!KV16) load_f32(gv, a.ldv, vv_vec, k0);
        if constexpr (KV16) cp_async_wait_all();
        __syncthreads();  // A: K tile t visible; every warp is done with the previous V tile
        if constexpr (KV16) issue_f16(gv16, sV, k0);

        const bool compute = w_rows && k0 <= w_hi;  // warp-uniform
        float s[NST][4];
        u32 p[BN / 16][4];
        if (compute) {
#pragma unroll
            for (int i = 0; i < NST; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                u32 qa[4];
                ldsm_x4(qa, aQ + kk * 32);
#pragma unroll
                for (int np = 0; np < BN / 16; ++np) {
                    u32 b[4];
                    ldsm_x4(b, aK + (np * 16 * LDS + kk * 16) * 2);
                    mma16816(s[2 * np], qa, b[0], b[1]);
                    mma16816(s[2 * np + 1], qa, b[2], b[3]);
                }
            }
        }
        if constexpr (!KV16) {
            store_f32(sV);
            if (has_next) load_f32(gk, a.ldk, kv_vec, k0 + BN);
        }
        if (compute) {
            if (k0 + BN - 1 > w_lo) {  // some key of this tile is after some row of this warp
#pragma unroll
                for (int i = 0; i < NST; ++i) {
                    const int key = k0 + i * 8 + 2 * tq;
                    if (key > lim_a) s[i][0] = neg_inf();
                    if (key + 1 > lim_a) s[i][1] = neg_inf();
                    if (key > lim_b) s[i][2] = neg_inf();
                    if (key + 1 > lim_b) s[i][3] = neg_inf();
                }
            }
            float mx_a = neg_inf(), mx_b = neg_inf();
#pragma unroll
            for (int i = 0; i < NST; ++i) {
                mx_a = fmaxf(mx_a, fmaxf(s[i][0], s[i][1]));
                mx_b = fmaxf(mx_b, fmaxf(s[i][2], s[i][3]));
            }
            float al_a, al_b, nb_a, nb_b;
            attn_softmax_step(mx_a, mx_b, cs, [](float x) { return ex2(x); }, m_a, m_b, al_a, al_b, nb_a, nb_b);
            float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
            for (int i = 0; i < NST; ++i) {
                s[i][0] = ex2(fmaf(s[i][0], cs, nb_a));
                s[i][1] = ex2(fmaf(s[i][1], cs, nb_a));
                s[i][2] = ex2(fmaf(s[i][2], cs, nb_b));
                s[i][3] = ex2(fmaf(s[i][3], cs, nb_b));
                sum_a += s[i][0] + s[i][1];
                sum_b += s[i][2] + s[i][3];
            }
            l_a = l_a * al_a + sum_a;  // per-thread partial sums: the quad is reduced once at the end
            l_b = l_b * al_b + sum_b;
#pragma unroll
            for (int i = 0; i < NDT; ++i) {
                o[i][0] *= al_a;
                o[i][1] *= al_a;
                o[i][2] *= al_b;
                o[i][3] *= al_b;
            }
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                p[kk][0] = pack_h2(s[2 * kk][0], s[2 * kk][1]);
                p[kk][1] = pack_h2(s[2 * kk][2], s[2 * kk][3]);
                p[kk][2] = pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                p[kk][3] = pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }
        }
        if constexpr (KV16) cp_async_wait_all();
        __syncthreads();  // B: V tile t visible; every warp is done with K tile t
        if constexpr (KV16) {
            if (has_next) issue_f16(gk16, sK, k0 + BN);
        }
        if (compute) {
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    u32 b[4];
                    ldsm_x4_t(b, aV + (kk * 16 * LDS + dp * 16) * 2);
                    mma16816(o[2 * dp], p[kk], b[0], b[1]);
                    mma16816(o[2 * dp + 1], p[kk], b[2], b[3]);
                }
            }
        }
        if constexpr (!KV16) {
            if (has_next) store_f32(sK);
        }
    }

    // Epilogue: quad-reduce the sums, normalise, write o (or this split's partial).
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int idx = hr ? rb : ra;
        if (idx >= rows) continue;
        const float l = hr ? l_b : l_a, m = hr ? m_b : m_a;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int pos = idx / G, h = kvh * G + idx % G;
        float* dst;
        bool vec;
        if (n_split == 1) {
            dst = a.o + static_cast<i64>(pos) * a.ldo + static_cast<i64>(h) * D;
            vec = aligned(a.o, a.ldo, 8);
        } else {
            dst = part_o(a, n_split, z, pos, h);
            vec = true;
            if (tq == 0) *part_ml(a, n_split, z, pos, h) = make_float2(l > 0.f ? m * cs : neg_inf(), l);
        }
#pragma unroll
        for (int i = 0; i < NDT; ++i) {
            const float x0 = o[i][2 * hr] * inv, x1 = o[i][2 * hr + 1] * inv;
            float* d2 = dst + i * 8 + 2 * tq;
            if (vec) {
                *reinterpret_cast<float2*>(d2) = make_float2(x0, x1);
            } else {
                d2[0] = x0;
                d2[1] = x1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decode (rows = R * G <= 8): block (z, kvh) streams keys [kb, ke) of split z in 64-key steps, f32
// throughout. Warp w scores keys 8w..8w+7 of a step for every row (lane holds D/32 dims), warp q
// keeps row q's running max and sum, then all 256 threads accumulate P V with float4 columns
// (D/4 threads per key row, 1024/D key groups), reduced across key groups at the end.


template <int D>
__device__ __forceinline__ void load_slice(const float* row, int lane, bool vec, float (&x)[D / 32]) {
    if constexpr (D >= 128) {
#pragma unroll
        for (int j = 0; j < D / 128; ++j) {
            const float4 t = ld4(row + j * 128 + lane * 4, vec);
            x[4 * j] = t.x;
            x[4 * j + 1] = t.y;
            x[4 * j + 2] = t.z;
            x[4 * j + 3] = t.w;
        }
    } else if constexpr (D == 64) {
        if (vec) {
            const float2 t = __ldg(reinterpret_cast<const float2*>(row + lane * 2));
            x[0] = t.x;
            x[1] = t.y;
        } else {
            x[0] = __ldg(row + lane * 2);
            x[1] = __ldg(row + lane * 2 + 1);
        }
    } else {
        x[0] = __ldg(row + lane);
    }
}

template <int D>
__device__ __forceinline__ void decode(const AttnArgs& a) {
    constexpr int NT = 256, MAXQ = ATTN_DEC_MAXQ, STEP = ATTN_DEC_STEP, QV = D / 32;
    constexpr int C4 = D / 4, KG = NT / C4, KPW = STEP / 8, KPT = STEP / KG;
    __shared__ float sS[MAXQ][STEP];
    __shared__ float sAlpha[MAXQ], sM[MAXQ], sL[MAXQ];
    __shared__ __align__(16) float sRed[KG][MAXQ][D];

    if (a.d != D || a.R <= 0 || a.Hkv <= 0 || a.H % a.Hkv != 0) return;
    const int G = a.H / a.Hkv, rows = a.R * G;
    const int n_split = a.n_split > 1 ? a.n_split : 1;
    if (rows > MAXQ || static_cast<int>(blockIdx.x) >= n_split || static_cast<int>(blockIdx.y) >= a.Hkv) return;
    const int z = blockIdx.x, kvh = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kv_end = min(a.P, a.q_offset + a.R);
    int kb, ke;
    split_range(a, n_split, z, kv_end, kb, ke);
    const float cs = a.scale * ATTN_LOG2E;

    float q[MAXQ][QV];
    {
        const bool qv = aligned(a.q, a.ldq, D == 64 ? 8 : 16);
#pragma unroll
        for (int r = 0; r < MAXQ; ++r) {
            if (r < rows) {
                const int pos = r / G, h = kvh * G + r % G;
                load_slice<D>(a.q + static_cast<i64>(pos) * a.ldq + static_cast<i64>(h) * D, lane, qv, q[r]);
            } else {
#pragma unroll
                for (int j = 0; j < QV; ++j) q[r][j] = 0.f;
            }
        }
    }
    const float* gk = a.k + static_cast<i64>(kvh) * D;
    const float* gv = a.v + static_cast<i64>(kvh) * D;
    const bool kvec = aligned(a.k, a.ldk, D == 64 ? 8 : 16), vvec = aligned(a.v, a.ldv, 16);
    const int c4 = tid % C4, kg = tid / C4;

    float m_w = neg_inf(), l_w = 0.f;  // row `warp`'s running max and sum (warps >= rows: unused)
    float acc[MAXQ][4];
#pragma unroll
    for (int r = 0; r < MAXQ; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;

    for (int s0 = kb; s0 < ke; s0 += STEP) {
        // V rows of this step go in flight with the K rows: one memory round trip per step.
        float4 vx[KPT];
#pragma unroll
        for (int i = 0; i < KPT; ++i) {
            const int key = s0 + kg + i * KG;
            vx[i] = key < ke ? ld4(gv + static_cast<i64>(key) * a.ldv + c4 * 4, vvec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        // Scores.
        float kx[KPW][QV];
#pragma unroll
        for (int j = 0; j < KPW; ++j) {
            const int key = s0 + warp * KPW + j;
            if (key < ke) {
                load_slice<D>(gk + static_cast<i64>(key) * a.ldk, lane, kvec, kx[j]);
            } else {
#pragma unroll
                for (int e = 0; e < QV; ++e) kx[j][e] = 0.f;
            }
        }
        // The lane's partial dot products of KB keys x MAXQ rows (rows past `rows` have q = 0),
        // summed over the warp in one warp_sum32: lane l then holds key jb + l / MAXQ, row
        // l % MAXQ (the bits of warp_sum per pair, without its 5 dependent shuffles per pair).
        constexpr int KB = 32 / MAXQ;
        static_assert(32 % MAXQ == 0 && KPW % KB == 0, "decode score batches");
#pragma unroll
        for (int jb = 0; jb < KPW; jb += KB) {
            float part[32];
#pragma unroll
            for (int jj = 0; jj < KB; ++jj) {
#pragma unroll
                for (int r = 0; r < MAXQ; ++r) {
                    float t = 0.f;
#pragma unroll
                    for (int e = 0; e < QV; ++e) t = fmaf(q[r][e], kx[jb + jj][e], t);
                    part[jj * MAXQ + r] = t;
                }
            }
            const float sc = warp_sum32(part);
            const int jl = jb + lane / MAXQ, r = lane % MAXQ;
            const int key = s0 + warp * KPW + jl;
            const bool vis = key < ke && key <= a.q_offset + r / G;
            if (r < rows) sS[r][warp * KPW + jl] = vis ? sc : neg_inf();
        }
        __syncthreads();
        // Online softmax statistics: warp r owns row r.
        if (warp < rows) {
            const float x0 = sS[warp][lane], x1 = sS[warp][lane + 32];
            const float mn = fmaxf(m_w, warp_max(fmaxf(x0, x1)));
            const float mu = mn == neg_inf() ? 0.f : mn;
            const float al = ex2((m_w - mu) * cs);
            const float p0 = ex2((x0 - mu) * cs), p1 = ex2((x1 - mu) * cs);
            l_w = l_w * al + warp_sum(p0 + p1);
            m_w = mn;
            sS[warp][lane] = p0;
            sS[warp][lane + 32] = p1;
            if (lane == 0) sAlpha[warp] = al;
        }
        __syncthreads();
        // P V.
#pragma unroll
        for (int r = 0; r < MAXQ; ++r) {
            if (r < rows) {
                const float al = sAlpha[r];
                acc[r][0] *= al;
                acc[r][1] *= al;
                acc[r][2] *= al;
                acc[r][3] *= al;
#pragma unroll
                for (int i = 0; i < KPT; ++i) {
                    const float pw = sS[r][kg + i * KG];
                    acc[r][0] = fmaf(pw, vx[i].x, acc[r][0]);
                    acc[r][1] = fmaf(pw, vx[i].y, acc[r][1]);
                    acc[r][2] = fmaf(pw, vx[i].z, acc[r][2]);
                    acc[r][3] = fmaf(pw, vx[i].w, acc[r][3]);
                }
            }
        }
        __syncthreads();  // sS and sAlpha are rewritten by the next step
    }

#pragma unroll
    for (int r = 0; r < MAXQ; ++r)
        if (r < rows) *reinterpret_cast<float4*>(&sRed[kg][r][c4 * 4]) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    if (warp < rows && lane == 0) {
        sM[warp] = m_w;
        sL[warp] = l_w;
    }
    __syncthreads();
    for (int i = tid; i < rows * D; i += NT) {
        const int r = i / D, c = i % D;
        float sum = 0.f;
#pragma unroll
        for (int g = 0; g < KG; ++g) sum += sRed[g][r][c];
        const float l = sL[r];
        const float x = l > 0.f ? sum / l : 0.f;
        const int pos = r / G, h = kvh * G + r % G;
        if (n_split == 1) {
            a.o[static_cast<i64>(pos) * a.ldo + static_cast<i64>(h) * D + c] = x;
        } else {
            part_o(a, n_split, z, pos, h)[c] = x;
            if (c == 0) *part_ml(a, n_split, z, pos, h) = make_float2(l > 0.f ? sM[r] * cs : neg_inf(), l);
        }
    }
}

// The arguments with the batch position read from device memory into q_offset.
__device__ __forceinline__ AttnArgs at_pos(AttnArgs a) {
    if (a.pos) a.q_offset += *a.pos;
    return a;
}

}  // namespace attn

#define ATTN_PREFILL(NAME, D, NW, KV16)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * (NW), (NW) == 4 ? 2 : 1) NAME(AttnArgs a) { pdl_enter(); \
        attn::prefill<D, NW, KV16>(attn::at_pos(a), AttnKv16{});                               \
    }
#define ATTN_PREFILL_KV16(NAME, D, NW)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * (NW), (NW) == 4 ? 2 : 1) NAME(AttnArgs a) { pdl_enter(); \
        attn::prefill<D, NW, true>(attn::at_pos(a), AttnKv16{a.k16, a.v16, a.ld16});           \
    }
#define ATTN_DECODE(NAME, D) \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME(AttnArgs a) { pdl_enter(); attn::decode<D>(attn::at_pos(a)); }

ATTN_PREFILL(flash_attn_d32, 32, ATTN_NW, false)
ATTN_PREFILL(flash_attn_d64, 64, ATTN_NW, false)
ATTN_PREFILL(flash_attn_d128, 128, ATTN_NW, false)
ATTN_PREFILL(flash_attn_d256, 256, ATTN_NW, false)
ATTN_PREFILL_KV16(flash_attn_h_w4_d32, 32, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d64, 64, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d128, 128, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d256, 256, 4)
ATTN_DECODE(flash_decode_d32, 32)
ATTN_DECODE(flash_decode_d64, 64)
ATTN_DECODE(flash_decode_d128, 128)
ATTN_DECODE(flash_decode_d256, 256)

// k16/v16[row, c] = half(k/v[row, c]) for rows < min(P, q_offset + R), c < Hkv * d; grid.y 0: K, 1: V.
// With ldvt > 0, V goes transposed instead (flash_attn_wg_d*): v16[c * ldvt + row], for rows up to
// the visible ones rounded up to 64, zero past the visible ones (ldvt >= that, a multiple of 8).
// The blocks of grid.x stride over the chunks of 8 values, so any grid covers the rows the position
// makes visible (the host sizes it for the cache's capacity, capped).
extern "C" __global__ void __launch_bounds__(256) attn_kv_to_f16(AttnArgs a_in) {
    pdl_enter();
    const AttnArgs a = attn::at_pos(a_in);
    const int width = a.Hkv * a.d;
    if (width <= 0 || (width & 7) != 0 || blockIdx.y > 1 || a.ld16 < width || (a.ld16 & 7) != 0) return;
    const bool is_v = blockIdx.y == 1;
    if (is_v && a.ldvt > 0) {
        // Thread item i: channel i % width, rows 8 (i / width) .. + 7 (a warp reads 32 channels of
        // one row at a time, coalesced; each thread writes 16 contiguous bytes of one channel).
        const int nrow = min(a.P, a.q_offset + a.R), npad = (nrow + 63) & ~63;
        if ((a.ldvt & 7) != 0 || npad > a.ldvt) return;
        const i64 n = static_cast<i64>(npad / 8) * width;
        for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<i64>(gridDim.x) * blockDim.x) {
            const int c = static_cast<int>(i % width), r0 = static_cast<int>(i / width) * 8;
            float x[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) x[e] = r0 + e < nrow ? __ldg(a.v + static_cast<i64>(r0 + e) * a.ldv + c) : 0.f;
            uint4 u;
            u.x = attn::pack_h2(x[0], x[1]);
            u.y = attn::pack_h2(x[2], x[3]);
            u.z = attn::pack_h2(x[4], x[5]);
            u.w = attn::pack_h2(x[6], x[7]);
            *reinterpret_cast<uint4*>(a.v16 + static_cast<i64>(c) * a.ldvt + r0) = u;
        }
        return;
    }
    const float* base = is_v ? a.v : a.k;
    const i64 ld = is_v ? a.ldv : a.ldk;
    __half* out = is_v ? a.v16 : a.k16;
    const bool vec = attn::aligned(base, ld, 16);
    const int nrow = min(a.P, a.q_offset + a.R);
    const int c8n = width / 8;
    const i64 n = static_cast<i64>(nrow) * c8n;
    for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<i64>(gridDim.x) * blockDim.x) {
        const int r = static_cast<int>(i / c8n), c = static_cast<int>(i % c8n) * 8;
        const float* src = base + static_cast<i64>(r) * ld + c;
        const float4 x0 = attn::ld4(src, vec), x1 = attn::ld4(src + 4, vec);
        uint4 u;
        u.x = attn::pack_h2(x0.x, x0.y);
        u.y = attn::pack_h2(x0.z, x0.w);
        u.z = attn::pack_h2(x1.x, x1.y);
        u.w = attn::pack_h2(x1.z, x1.w);
        *reinterpret_cast<uint4*>(out + static_cast<i64>(r) * a.ld16 + c) = u;
    }
}

// o[r, h*d + c] = sum_z w_z O_z / sum_z w_z with w_z = l_z * 2^(m_z - max_z m_z); splits with l_z = 0
// saw no key of the row and weigh nothing (split 0 always holds key 0, which every row sees).
// One block per (r, h): the block first takes every split's weight at once (max, then weights, in
// shared memory), then ATTN_COMBINE_THREADS / (d / 4) groups of threads each sum a strided subset
// of the splits for 4 output values, and the groups' sums are added. The loads of the second pass
// are independent of each other, so the splits are read in a few round trips, not one per split
// (a thread walking all splits with an online rescale took 47 us for 61 splits on the H200).
extern "C" __global__ void __launch_bounds__(ATTN_COMBINE_THREADS) flash_attn_combine(AttnArgs a) {
    pdl_enter();
    __shared__ float sw[ATTN_COMBINE_MAX_SPLITS];
    __shared__ float red[32];
    __shared__ __align__(16) float4 sacc[ATTN_COMBINE_THREADS];
    const int n = a.n_split;
    if (a.d <= 0 || (a.d & 3) != 0 || a.d / 4 > ATTN_COMBINE_THREADS || a.R <= 0 || a.H <= 0 || n <= 1 ||
        n > ATTN_COMBINE_MAX_SPLITS || blockDim.x != ATTN_COMBINE_THREADS)
        return;  // n_split 1 wrote o; the host checks the rest
    const i64 rh = blockIdx.x;
    if (rh >= static_cast<i64>(a.R) * a.H) return;
    const int h = static_cast<int>(rh % a.H), r = static_cast<int>(rh / a.H);
    const int tid = threadIdx.x;
    float mx = attn::neg_inf();
    for (int z = tid; z < n; z += blockDim.x) {
        const float2 ml = *attn::part_ml(a, n, z, r, h);
        if (ml.y > 0.f) mx = fmaxf(mx, ml.x);
    }
    mx = warp_max(mx);
    if ((tid & 31) == 0) red[tid >> 5] = mx;
    __syncthreads();
    mx = warp_max((tid & 31) < (int)(blockDim.x >> 5) ? red[tid & 31] : attn::neg_inf());
    float l = 0.f;
    for (int z = tid; z < n; z += blockDim.x) {
        const float2 ml = *attn::part_ml(a, n, z, r, h);
        const float w = ml.y > 0.f ? ml.y * attn::ex2(ml.x - mx) : 0.f;
        sw[z] = w;
        l += w;
    }
    const float L = block_sum(l, red);  // its barriers also publish sw (and order red's reuse)
    const int c4n = a.d / 4, groups = ATTN_COMBINE_THREADS / c4n;
    const int g = tid / c4n, c = (tid % c4n) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (g < groups) {
#pragma unroll 4
        for (int z = g; z < n; z += groups) {
            const float w = sw[z];
            if (w > 0.f) {
                const float4 x = *reinterpret_cast<const float4*>(attn::part_o(a, n, z, r, h) + c);
                acc.x = fmaf(w, x.x, acc.x);
                acc.y = fmaf(w, x.y, acc.y);
                acc.z = fmaf(w, x.z, acc.z);
                acc.w = fmaf(w, x.w, acc.w);
            }
        }
    }
    sacc[tid] = acc;
    __syncthreads();
    if (g != 0) return;
    for (int j = 1; j < groups; ++j) {
        const float4 x = sacc[j * c4n + tid];
        acc.x += x.x;
        acc.y += x.y;
        acc.z += x.z;
        acc.w += x.w;
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    float* dst = a.o + static_cast<i64>(r) * a.ldo + static_cast<i64>(h) * a.d + c;
    if (attn::aligned(a.o, a.ldo, 16)) {
        *reinterpret_cast<float4*>(dst) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    } else {
        dst[0] = acc.x * inv;
        dst[1] = acc.y * inv;
        dst[2] = acc.z * inv;
        dst[3] = acc.w * inv;
    }
}

// The wgmma prefill kernel (sm_90a; the CPU emulator of lab/attention/emu, which runs this file,
// has no wgmma: lab/attention/wg_emu_test.cpp runs that kernel on lab/gemm/emu's instead).
#ifndef TALLY_ATTN_EMU
#include "attention_wg.cuh"
#endif
