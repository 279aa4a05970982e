// The delta rule kernels' shared parts (delta.cu): the argument struct, the work split, the
// shared-memory layouts of the chunked prep and scan, and the mma / ldmatrix / stmatrix helpers.
#pragma once
#include "common.cuh"
#include "wgmma.cuh"

struct DeltaArgs {
    const float* q; i64 ldq;     // [R, Hk*dk]: queries of the last R tokens
    const float* k; i64 ldk;     // [T, Hk*dk]
    const float* v; i64 ldv;     // [T, Hv*dv]
    const float* g; i64 ldg;     // [T, Hv] log-decay (<= 0)
    const float* beta; i64 ldb;  // [T, Hv]
    float* state;                // [Hv, dk*dv] in/out
    float* o; i64 ldo;           // [R, Hv*dv]
    float* work;                 // delta_work_floats(T, Hk, Hv, dk, dv) floats (chunked path only)
    i32 T, R, Hk, Hv, dk, dv;
    // The fused prologue (ops/fused.rs; off when kx is null): the delta gates and the q and k L2
    // norms before the rule, in the same launch: delta_rule_step at one token, or
    // delta_rule_chunk_prep_pro for a prompt (dk = 128; there kx and qx are the k and q views,
    // read through k and q). Each block computes what it reads (its value head's gates, its key
    // head's normed q and k) with the unfused kernels' expressions, and one block per (token,
    // value head) stores the gates, so they equal delta_gates' outputs bit for bit. The norms
    // run in place in the plan (their input is their output), so their normed q and k are not
    // stored: the host fuses only where no later node reads them.
    const float* kx; i64 ldkx;   // [1, Hk*dk] the k L2 norm's input (and output view)
    const float* qx; i64 ldqx;   // [1, Hk*dk] the q L2 norm's
    float keps, kscale, qeps, qscale;
    const float* gb; i64 ldgb;   // [1, Hv] delta gates' beta logits
    const float* ga; i64 ldga;   // [1, Hv] alpha
    const float* dt_bias;        // [Hv]
    const float* ssm_a;          // [Hv] (= -exp(A_log))
    float* beta_out;             // [1, Hv] the gates' outputs (the views g and beta above)
    float* g_out;
    // Per-token states (delta_rule_step only; off when null): the state after token t, t < T,
    // at snap + t * snap_ld in the state's layout (a speculative verification's rollback points).
    float* snap; i64 snap_ld;
};


// ---------------------------------------------------------------------------------------------
// Workspace: per chunk c and value head h: W [64][dk] f16, P [2][64][64] f16 (hi, lo), U [64][dv] f32,
// G [64] f32; per chunk c and key head: K^T [dk][64] f16 (the scan's wgmma A operand of the state
// update), Q [64][dk] f16. Rows (tokens) past T are zero. Each is stored as the image of the scan's
// shared-memory operand (delta_img_h: wgmma.cuh's swizzled K-major blocks; U per 32-column slice
// with its 16-byte chunks swizzled, delta_img_u), so the scan moves them with bulk copies.
// Sizes in floats (every part a multiple of 16 bytes):

__host__ __device__ constexpr i64 delta_chunks(i64 T) { return (T + DELTA_C - 1) / DELTA_C; }

__host__ __device__ constexpr i64 delta_work_floats(i64 T, i64 Hk, i64 Hv, i64 dk, i64 dv) {
    return delta_chunks(T) * (Hv * (32 * dk + 4096 + 64 * dv + 64) + Hk * 64 * dk);
}

struct DeltaWork {
    __half* w;   // [nc][Hv][64][dk] (as delta_img_h)
    __half* p;   // [nc][Hv][2][64][64]: hi, lo (as delta_img_h)
    float* u;    // [nc][Hv][64][dv] (as delta_img_u)
    float* g;    // [nc][Hv][64]
    __half* kh;  // [nc][Hk][dk][64]: K transposed (as delta_img_h)
    __half* qh;  // [nc][Hk][64][dk] (as delta_img_h)
};

// Element (r, k) of an f16 operand image: [k / 64][64 rows][64], 16-byte chunk (k % 64) / 8 of row r
// at chunk ((k % 64) / 8) ^ (r & 7) (wgmma.cuh's layout; K^T, dk rows, has k < 64: one block).
__host__ __device__ __forceinline__ int delta_img_h(int r, int k) {
    return ((k >> 6) << 12) + (r << 6) + ((((k & 63) >> 3) ^ (r & 7)) << 3) + (k & 7);
}
// Element (i, j) of U's image: [j / 32][64][32] f32 (one 8 KB slice per scan block), 16-byte chunk
// (j % 32) / 4 of row i at chunk ((j % 32) / 4) ^ (i & 7) (the scan's reads are then conflict free).
__host__ __device__ __forceinline__ int delta_img_u(int i, int j) {
    return ((j >> 5) << 11) + (i << 5) + ((((j & 31) >> 2) ^ (i & 7)) << 2) + (j & 3);
}
// The scan's tiles (S^T, vnew and X as [32][...], U's slice above, the m64n32 products) are laid
// out for blocks of 32 value columns, the grid's column split.
static_assert(DELTA_NS == 32, "delta_img_u and the scan's smem layout assume 32 columns a block");

__device__ inline DeltaWork delta_work_split(const DeltaArgs& a) {
    const i64 nc = delta_chunks(a.T);
    float* p = a.work;
    DeltaWork w;
    w.w = (__half*)p;  p += nc * a.Hv * 32 * a.dk;
    w.p = (__half*)p;  p += nc * a.Hv * 4096;
    w.u = p;           p += nc * a.Hv * 64 * a.dv;
    w.g = p;           p += nc * a.Hv * 64;
    w.kh = (__half*)p; p += nc * a.Hk * 32 * a.dk;
    w.qh = (__half*)p;
    return w;
}

// ---------------------------------------------------------------------------------------------
// Shared-memory layouts (bytes). Row strides are padded so that ldmatrix and the fragment-layout
// stores are bank-conflict free: f16 rows of 64/128 (+8) halves, 32 (+8) halves; f32 rows 32 (+8).

#define DELTA_LDT 72   // f16 stride of 64-wide tiles (T, P)
#define DELTA_LDA 72   // f32 stride of A / T in the prep

// Region X holds K hi, K lo, Q hi, Q lo during the Gram products, then (reused) beta*V hi, lo,
// beta*exp(G)*K, T (f16) and the off-diagonal scratch.
struct DeltaPrepSmem {
    int kh, kl, qh, ql, vh, vl, bk, tm, z, am, tf, gs, bs, kn, red, total;
};

__host__ __device__ constexpr DeltaPrepSmem delta_prep_layout(int dk) {
    DeltaPrepSmem s{};
    const int ldk = dk + 8, ldv = DELTA_DV_MAX + 8;
    const int tile = 64 * ldk * 2;
    s.kh = 0; s.kl = tile; s.qh = 2 * tile; s.ql = 3 * tile;
    int o = 0;
    s.vh = o; o += 64 * ldv * 2;
    s.vl = o; o += 64 * ldv * 2;
    s.bk = o; o += tile;
    s.tm = o; o += 64 * DELTA_LDT * 2;
    s.z = o;  o += 3 * 256 * 4;
    o = o > 4 * tile ? o : 4 * tile;             // end of region X
    s.am = o; o += 64 * DELTA_LDA * 4;           // A f32
    s.tf = o; o += 64 * DELTA_LDA * 4;           // T f32
    s.gs = o; o += 64 * 4;
    s.bs = o; o += 64 * 4;
    s.red = o; o += 32 * 4;
    s.kn = o; o += 64 * 4;                       // the prologue's k norm scales (prep_pro)
    s.total = o;
    return s;
}

__host__ __device__ constexpr int delta_prep_smem_bytes(int dk) { return delta_prep_layout(dk).total; }

// The scan's operands of the tensor cores (wgmma.cuh's K-major swizzled blocks, each 1024-byte
// aligned): W, Q [64][dk] (A), K^T [dk][64] (A), P hi, lo [64][64] (A), S hi, lo [32][dk] (B: S^T),
// vnew hi, lo and its decayed copy X hi, lo [32][64] (B); then U (this block's 32-column slice,
// f32, as delta_img_u), G, the reduction slots and two mbarriers (the bulk copies of chunk c's
// {W, Q, U, G} and {K^T, P}). Offsets from a 1024-aligned base: the kernel rounds its dynamic
// buffer up, so the size has 1024 bytes of slack.
// With stages = 2 (delta_rule_chunk_scan2) the copied operands, {W, Q, K^T, P hi, lo, U, G},
// form one block (`stage` bytes, a multiple of 1024) held twice, chunk c's in block c % 2, and
// there are two mbarriers a set (A, B of block 0, then of block 1); the S, vnew and X operands
// and the reduction slots stay single. stages = 1 is the layout before (stage = 0).
struct DeltaScanSmem {
    int wt, qt, kt, ph, pl, sh, sl, vh, vl, xh, xl, ub, gb, red, mb, stage, total;
};

__host__ __device__ constexpr DeltaScanSmem delta_scan_layout(int dk, int stages = 1) {
    DeltaScanSmem s{};
    int o = 0;
    s.wt = o; o += 64 * dk * 2;
    s.qt = o; o += 64 * dk * 2;
    s.kt = o; o += dk * 64 * 2;
    s.ph = o; o += 64 * 64 * 2;
    s.pl = o; o += 64 * 64 * 2;
    if (stages == 2) {
        s.ub = o; o += 64 * 32 * 4;
        s.gb = o; o += 64 * 4;
        o = (o + 1023) / 1024 * 1024;
        s.stage = o;
        o *= 2;
    }
    s.sh = o; o += 32 * dk * 2;
    s.sl = o; o += 32 * dk * 2;
    s.vh = o; o += 32 * 64 * 2;
    s.vl = o; o += 32 * 64 * 2;
    s.xh = o; o += 32 * 64 * 2;
    s.xl = o; o += 32 * 64 * 2;
    if (stages != 2) {
        s.ub = o; o += 64 * 32 * 4;
        s.gb = o; o += 64 * 4;
        s.stage = 0;
    }
    s.red = o; o += 16 * 4;
    s.mb = o; o += 2 * stages * 8;
    s.total = o + 1024;
    return s;
}

__host__ __device__ constexpr int delta_scan_smem_bytes(int dk, int stages = 1) { return delta_scan_layout(dk, stages).total; }

// ---------------------------------------------------------------------------------------------
// Offsets in wgmma.cuh's swizzled K-major blocks: 16-byte chunk c (of the 8 in a 128-byte row) of
// row r; element (r, k) of an operand of `rows` rows (K = 64 per block, blocks one after another).
__device__ __forceinline__ u32 delta_swz(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }
__device__ __forceinline__ u32 delta_kmaj(int rows, int r, int k) {
    return (u32)((k >> 6) * rows * 128) + delta_swz(r, (k & 63) >> 3) + (u32)((k & 7) * 2);
}

// PTX helpers (the CPU emulator in lab/gemm/emu supplies the primitives under them).
#ifdef TALLY_EMU
__device__ __forceinline__ u32 delta_smem_addr(const void* p) { return smem_u32(p); }
__device__ __forceinline__ void delta_ldsm_x4(u32* r, u32 addr) {
    ldsm_x4(reinterpret_cast<const unsigned short*>(emu::st().dyn_smem + addr), r);
}
__device__ __forceinline__ void delta_ldsm_x4_t(u32* r, u32 addr) {
    ldsm_x4(reinterpret_cast<const unsigned short*>(emu::st().dyn_smem + addr), r, true);
}
__device__ __forceinline__ void delta_mma(float* d, const u32* a, u32 b0, u32 b1) { mma_16816(d, a, b0, b1); }
__device__ __forceinline__ void delta_stsm_x4_t(u32 addr, const u32* r) {
    stsm_x4_t(reinterpret_cast<unsigned short*>(emu::st().dyn_smem + addr), r);
}
#else
__device__ __forceinline__ u32 delta_smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void delta_ldsm_x4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void delta_ldsm_x4_t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// d += a (16x16, row) * b (16x8, col); fragments as in the PTX ISA (g = lane/4, t = lane%4):
// a: {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}; b: {B[2t..][g], B[2t+8..][g]};
// d: {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}.
__device__ __forceinline__ void delta_mma(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 f16 blocks in the mma accumulator layout (register i of lane l: block i's row l / 4,
// columns 2 (l % 4), +1), each stored transposed: lane 8i + j gives the address of the block's
// column j, which receives its 8 rows as 16 contiguous bytes.
__device__ __forceinline__ void delta_stsm_x4_t(u32 addr, const u32* r) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
#endif

// ldmatrix lane addresses (l = lane). For a 16x16 tile at (r0, c0) of a row-major f16 array:
//  * A operand, row-major storage [m][k]:              row r0 + (l & 15), col c0 + (l >> 4) * 8
//  * B operand (two n8 tiles), storage [k][n], .trans:  same formula (rows k, cols n);
//    regs {0,1} = n-tile 0, {2,3} = n-tile 1
//  * A operand, storage [k][m] (A^T stored), .trans:    row (k) r0 + (l & 7) + ((l >> 4) & 1) * 8,
//                                                       col (m) c0 + ((l >> 3) & 1) * 8
//  * B operand (two n8 tiles), storage [n][k], plain:   row (n) r0 + (l & 7) + ((l >> 4) & 1) * 8,
//                                                       col (k) c0 + ((l >> 3) & 1) * 8
__device__ __forceinline__ u32 delta_off_rm(int l, int r0, int c0, int ld) {
    return (u32)(((r0 + (l & 15)) * ld + c0 + (l >> 4) * 8) * 2);
}
__device__ __forceinline__ u32 delta_off_tr(int l, int r0, int c0, int ld) {
    return (u32)(((r0 + (l & 7) + ((l >> 4) & 1) * 8) * ld + c0 + ((l >> 3) & 1) * 8) * 2);
}

__device__ __forceinline__ u32 delta_h2(float lo_col, float hi_col) {
    __half2 h = __floats2half2_rn(lo_col, hi_col);
    return *reinterpret_cast<u32*>(&h);
}

// Power-of-two scale 2^s with m * 2^s < 2^14 (m = max |x| >= 0), s clamped to [-100, 100];
// 1 for m == 0 or NaN. inv = 2^-s exactly.
__device__ __forceinline__ float delta_scale(float m, float* inv) {
    int s = 0;
    if (m > 0.0f) {
        const int e = (int)((__float_as_uint(m) >> 23) & 255u) - 127;  // floor(log2 m)
        s = 13 - e;
        s = s < -100 ? -100 : (s > 100 ? 100 : s);
    }
    *inv = __uint_as_float((u32)(127 - s) << 23);
    return __uint_as_float((u32)(127 + s) << 23);
}

// x -> (hi, lo) f16 pairs with hi + lo ~= x * sc (x already finite).
__device__ __forceinline__ void delta_split(float x0, float x1, float sc, u32* hi, u32* lo) {
    x0 *= sc;
    x1 *= sc;
    __half2 h = __floats2half2_rn(x0, x1);
    const float2 hf = __half22float2(h);
    __half2 l = __floats2half2_rn(x0 - hf.x, x1 - hf.y);
    *hi = *reinterpret_cast<u32*>(&h);
    *lo = *reinterpret_cast<u32*>(&l);
}

__device__ __forceinline__ bool delta_aligned16(const void* p, i64 ld) {
    return ((((unsigned long long)p) & 15ull) == 0) && ((ld & 3) == 0);
}

// 4 consecutive floats from row-major [rows][ld] at (r, c); vectorised when aligned.
__device__ __forceinline__ float4 delta_ld4(const float* p, i64 ld, i64 r, int c, bool vec) {
    const float* s = p + r * ld + c;
    if (vec) return __ldg(reinterpret_cast<const float4*>(s));
    return make_float4(__ldg(s), __ldg(s + 1), __ldg(s + 2), __ldg(s + 3));
}

