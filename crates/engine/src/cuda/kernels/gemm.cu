// Quantised-weight GEMM: y[m, n] = sum_k x[m, k] * W[n, k], x and y f32, W in a GGUF format
// (quant.cuh), dense or over the routed (token, expert) pairs of a MoE layer.
//
// Kernels (one per weight type <t> in q4_k q5_k q6_k q8_0 bf16 f16 f32), all taking GemmArgs by
// value:
//   gemm_<t>      tensor cores, block tile BM x BN = 128 x 128, 256 threads, dynamic smem
//                 GEMM_SMEM_BYTES(type, 128) (> 48 KB: raise the function's max dynamic smem first)
//   gemm_<t>_m64  the same with BM = 64,  smem GEMM_SMEM_BYTES(type, 64)
//   gemm_<t>_m32  the same with BM = 32,  smem GEMM_SMEM_BYTES(type, 32)
//   gemv_<t>      CUDA cores, one x row at a time, 2 output columns per warp, up to
//                 GEMV_THREADS = 256 threads (16 columns): for M = 1 (and as an always-correct
//                 fallback for any M). The integer formats with K <= GEMV_QK_MAX take the
//                 integer body (x as int16 in 20 KB of static smem, dp2a; gemv_int_body), the
//                 float formats and longer rows the f32 body (no smem)
// and, for F32 weights only (dense, no MoE), exact f32 SIMT GEMMs (f32 FFMA, f32 accumulation):
//   gemm_f32_simt      block tile SIMT_BM x SIMT_BN = 64 x 64, K step SIMT_BK = 16, 256 threads
//                      (4 x 4 outputs each), static smem 3 stages x 128 x 20 f32 = 30720 bytes
//   gemm_f32_simt_m32  block tile 32 x 32, K step 32 split over SIMT_M32_KS = 4 slices of 64
//                      threads (4 x 4 outputs each, partials summed in slice order), static smem
//                      3 x 64 x 36 f32 = 27648 bytes: 4x the blocks of the 64 x 64 grid, for
//                      shapes whose 64 x 64 grid leaves SMs idle (N = 256 on 132 SMs: M < 2112)
//   gemm_f32_tf32      gemm_f32_simt's tiles, ring and loads with the products on the tensor cores
//                      in three tf32 passes (3xTF32, f32 accumulators: ~f32 accuracy; simt_body)
//   gemm_f32_tf32_m32  the same for gemm_f32_simt_m32's sliced 32 x 32 tiles
//   (all four: no dynamic smem, launch with 0; __launch_bounds__(256, 2))
// Dynamic smem in bytes, GEMM_SMEM_BYTES(t, BM) = 2*(BM+128)*72*2 + 8*BM + 3*256*slot(t), slot =
// 32 (q4_k, the 32-element and codebook formats but q5_0, IQ4_XS), 48 (q5_k, q8_0, q2_k, q5_0), 112 (q6_k),
// 96 (q3_k), 64 (f16, bf16), 128 (f32). At BM = 32 a block of 72 KB or less leaves room for 3
// blocks per multiprocessor (228 KB), one of 83 KB for 2:
//            q4_k    q5_k    q6_k    q8_0    f16/bf16  f32
//   BM=128   99328   111616  160768  111616  123904    173056
//   BM=64    80384   92672   141824  92672   104960    154112
//   BM=32    70912   83200   132352  83200   95488     144640
// Grids (x, y, 1):
//   tensor-core dense: (ceil(N / GEMM_BN), ceil(M / BM));  MoE: (ceil(N / GEMM_BN), max_tiles)
//   gemv dense:        (ceil(N / rows), M);                MoE: (ceil(N / rows), max_tiles)
//                      rows = 2 * warps per block (GEMV_ROWS = 16 at GEMV_THREADS; fewer warps
//                      spread a short N over more multiprocessors)
//   gemm_f32_simt, gemm_f32_tf32: (ceil(N / 64), ceil(M / 64));  gemm_f32_simt_m32, gemm_f32_tf32_m32:
//                      (ceil(N / 32), ceil(M / 32))
// where max_tiles = ceil(M / BM) + E bounds the tiles moe_route (moe.cu) makes for that BM
// (any tile size works for gemv). Blocks of unused tiles (tile_expert -1) exit.
//
// Preconditions (checked where cheap; a violated one writes nothing, so the caller's poison
// shows): K % 64 == 0 for the tensor-core kernels, K % 32 == 0 for gemv, and K a multiple of the
// type's block (256 for K-quants); w 16-byte aligned, w_row_bytes = the GGUF row size,
// w_expert_bytes = N * w_row_bytes (MoE) or 0; layout 1 needs N == 2 * n_head * head_dim.
// x is read with 16-byte loads when x is 16-byte aligned and ldx % 4 == 0, else element-wise;
// y is written in pairs when 8-byte aligned with ldy even. The SIMT kernels take any K >= 1 and
// any alignment (16-byte copies of x / W where the pointer, the row stride and K allow, else
// 4-byte ones), layouts 0 and 1, and write nothing for MoE arguments (tile_expert or
// sorted_rows set); their outputs are scalar stores.
//
// Precision: the tensor-core kernels round x and the dequantised W to f16 (f32 accumulation):
// relative Frobenius error ~1e-3 against f64. gemv's f32 body dequantises in f32 (error ~1e-6),
// its integer body rounds x to int16 per 16 elements (~2e-5, exact integer sums). The SIMT
// kernels are f32 throughout, in a fixed order (deterministic): ~2e-7 at K = 2048.
//
// Tensor-core kernel design: 8 warps as 2 (M) x 4 (N), warp tile (BM/2) x 32, mma.sync
// m16n8k16 f16 -> f32, operands from shared memory by ldmatrix. K steps of GEMM_BK = 64 through
// two f16 shared-memory stages: while the tensor cores work on stage k, the thread's loads for
// stage k+1 are in flight: x (f32) into registers, and its raw GGUF weight bytes by cp.async into
// a private slot of a GEMM_WSTAGES-deep ring (so the weight stream, the DRAM-bound part, has
// two stages in flight); after the MMAs the thread converts them (x -> f16, W dequantised ->
// f16) into the other f16 stage. Rows are padded to GEMM_LDS = 72 halves (144 bytes) so
// ldmatrix's 8 row addresses hit distinct bank groups.
#include "common.cuh"
#include "quant.cuh"

struct GemmArgs {
    const u8* w;
    i64 w_row_bytes;
    i64 w_expert_bytes;  // expert e's rows start at w + e * w_expert_bytes (0 for dense)
    const float* x;
    i64 ldx;             // input rows of K
    float* y;
    i64 ldy;             // output rows
    i32 M, N, K;         // dense: M rows; MoE: M = number of (token, expert) pairs
    // MoE (all null for dense):
    const i32* sorted_rows;  // [M] output row ids (pair index t*k+j) grouped by expert
    i32 x_div;               // input row = sorted_rows[i] / x_div
    const i32* tile_expert;  // per MoE tile: expert id, or -1 for an unused tile
    const i32* tile_start;   // first index into sorted_rows; null: one-row tiles in pair order
    const i32* tile_rows;    // rows in this tile (<= BM)
    // Output layout: 0 plain (column n = weight row n); 1 q/gate split: weight row
    // n = h*2*hd + i goes to column h*hd + i if i < hd else n_head*hd + h*hd + (i - hd).
    i32 layout;
    i32 head_dim;
    i32 n_head;
    i32 n_expert;  // MoE: experts in w; a tile of an expert outside [0, n_expert) writes nothing
    // Paired projections (gemv_<t> only, layout 0; null otherwise): warp w takes output column
    // n = blockIdx.x * warps + w, row n of w and row n of w2 (same type, shape and expert
    // stride), and writes y and y2, and (y3 set: gate/up) y3 = silu(y) * y2. Each row's sum is
    // the one the unpaired kernel makes for it (same pieces, lanes and order), and y3 the
    // binary map's SwiGlu of the two, so fusing the nodes changes no bit.
    const u8* w2;
    float* y2;
    i64 ldy2;
    float* y3;
    i64 ldy3;
    // The wgmma tiles (gemm_<t>_w<BT>, gemm_wg.cuh) only: x as f16 in their K order (x_f16_perm),
    // ldxh halves a row (a multiple of 8); null otherwise.
    const u16* xh;
    i64 ldxh;
};

// gemv_multi_<t>: up to GEMV_MULTI_SEGS dense projections of ONE input (same x, M and K, weights
// of type <t>) in one launch, e.g. qkv, z, beta and alpha of a linear-attention layer at decode.
// Segment s is an ordinary gemv_<t> argument set (plain or paired, either layout) with rw[s] rows
// per warp (2: gemv_<t>'s body, 4: gemv4_<t>'s); its blocks are blockIdx.x in
// [block_end[s-1], block_end[s]), each running that body on block index blockIdx.x -
// block_end[s-1], so every output is the bits gemv_<t> (or gemv4_<t>) writes for that node alone.
struct MultiGemvArgs {
    GemmArgs seg[GEMV_MULTI_SEGS];
    i32 block_end[GEMV_MULTI_SEGS];  // prefix sums of the segments' grid widths
    i32 rw[GEMV_MULTI_SEGS];         // rows per warp: 2 or 4
    i32 n_seg;
    i32 mr;  // gemv_multi: 0 or 1, a block per x row (grid.y = M); 2..GEMVR_MAX_M, every x row
             // in each block (grid.y = 1, rw 2, integer formats, K <= GEMV_QK_MAX / GEMVR_MAX_M:
             // gemv_int_mr_body); mmv_multi: 0
};

// The segment s of a gemv_multi_<t> / mmv_multi_<t> launch that this block belongs to, its index
// bx inside the segment and the segment's block count gx; false past the last segment. Callers
// then pick m.seg[j] with a constant j (an unrolled `s == j` test) so the arguments stay in the
// parameter bank.
__device__ __forceinline__ bool multi_segment(const MultiGemvArgs& m, int& s, int& bx, int& gx) {
    const int b = static_cast<int>(blockIdx.x);
#pragma unroll
    for (int j = 0; j < GEMV_MULTI_SEGS; j++) {
        const int lo = j == 0 ? 0 : m.block_end[j - 1];
        if (j < m.n_seg && b >= lo && b < m.block_end[j]) {
            s = j;
            bx = b - lo;
            gx = m.block_end[j] - lo;
            return true;
        }
    }
    return false;
}

// Raw weight bytes one thread stages per K step (Piece<T>::SLOT_WORDS * 4).
#define GEMM_SLOT_BYTES(t)                                                                          \
    ((t) == QT_Q6_K ? 112 : (t) == QT_Q5_K || (t) == QT_Q8_0 || (t) == QT_Q2_K || (t) == QT_Q5_0 ? 48 : (t) == QT_F32 ? 128 \
     : (t) == QT_Q3_K ? 96 : (t) == QT_F16 || (t) == QT_BF16 ? 64 : 32)
// Dynamic shared memory: two stages of A [BM][72] and B [128][72] f16, two i32 row tables of BM,
// then GEMM_WSTAGES stages of raw weight bytes (GEMM_THREADS slots each).
#define GEMM_SMEM_BYTES(t, bm) \
    (2 * ((bm) + GEMM_BN) * GEMM_LDS * 2 + 8 * (bm) + GEMM_WSTAGES * GEMM_THREADS * GEMM_SLOT_BYTES(t))
// f32 SIMT GEMM: block tile SIMT_BM x SIMT_BN (gemm_f32_simt) or SIMT_M32_BM x SIMT_M32_BN with
// SIMT_M32_KS K slices (gemm_f32_simt_m32); K steps of SIMT_BK through SIMT_STAGES smem stages.

#ifndef TALLY_EMU
__device__ __forceinline__ void ldsm_x4(const u16* p, u32 r[4]) {
    const u32 addr = static_cast<u32>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
// c += a (16x16, row) * b (16x8, col), f16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x rounded to tf32 (10 mantissa bits; to nearest, ties away from zero), as its 32-bit pattern
// (the 13 low bits zero).
__device__ __forceinline__ u32 tf32_of(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
// c += a (16x8, row) * b (8x8, col), tf32 inputs, f32 accumulators. Fragments (g = lane / 4,
// t = lane % 4): A a0..a3 = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B b0, b1 = (k t, col g),
// (k t + 4, col g); C as mma_16816's.
__device__ __forceinline__ void mma_1688_tf32(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// v as hi + lo, both tf32: hi = tf32(v), lo = tf32(v - hi) (v - hi is exact in f32), so hi + lo
// holds about 21 of v's 24 significant bits, with f32's exponent range.
__device__ __forceinline__ void tf32_split(float v, u32& hi, u32& lo) {
    hi = tf32_of(v);
    lo = tf32_of(v - __uint_as_float(hi));
}

// Output column of weight row n.
__device__ __forceinline__ int gemm_out_col(int n, bool split, int hd, int n_head) {
    if (!split) return n;
    const int h = n / (2 * hd), i = n - h * 2 * hd;
    return i < hd ? h * hd + i : n_head * hd + h * hd + (i - hd);
}

// Four consecutive floats of x (16-byte load when allowed).
__device__ __forceinline__ float4 ld_x4(const float* p, bool vec) {
    if (vec) return __ldg(reinterpret_cast<const float4*>(p));
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

// Checks shared by both kernel families; false: write nothing.
__device__ __forceinline__ bool gemm_args_ok(const GemmArgs& a, int k_mult) {
    if (a.M <= 0 || a.N <= 0 || a.K <= 0 || a.K % k_mult != 0) return false;
    if (a.layout == 1 && (a.head_dim <= 0 || a.n_head <= 0 || a.N != 2 * a.n_head * a.head_dim)) return false;
    return a.layout == 0 || a.layout == 1;
}

// The block's rows: dense rows [start, start + rows), or MoE tile blockIdx.y (expert weights
// selected into w). False when the block has nothing to do.
__device__ __forceinline__ bool gemm_block_rows(const GemmArgs& a, int max_rows, const u8*& w, int& start,
                                                int& rows) {
    w = a.w;
    if (a.tile_expert) {
        const int t = blockIdx.y;
        const int e = a.tile_expert[t];
        if (e < 0 || e >= a.n_expert) return false;
        // Pair order (decode, one row per tile): tile t is pair t, and tile_expert is the router's
        // [T, k] ids themselves, so no routing tables are built.
        start = a.tile_start ? a.tile_start[t] : t;
        rows = a.tile_start ? a.tile_rows[t] : 1;
        if (start < 0 || start >= a.M || rows <= 0) return false;
        rows = min(rows, min(max_rows, a.M - start));
        w += static_cast<i64>(e) * a.w_expert_bytes;
    } else {
        start = blockIdx.y * max_rows;
        if (start >= a.M) return false;
        rows = min(max_rows, a.M - start);
    }
    return true;
}

// The block's row tables in shared memory: input row (0 for unused rows) and output row (-1
// for unused rows) of each of its max_rows rows; ends with the barrier that publishes them.
__device__ __forceinline__ void gemm_row_tables(const GemmArgs& a, int start, int rows, int max_rows, i32* s_xrow,
                                                i32* s_yrow);
// Input and output row of row i of the block's rows; false for an invalid MoE entry.
__device__ __forceinline__ bool gemm_row(const GemmArgs& a, int start, int i, int& xr, int& yr) {
    if (!a.tile_expert) {
        xr = yr = start + i;
        return true;
    }
    const int s = a.sorted_rows ? a.sorted_rows[start + i] : start + i;
    if (s < 0 || s >= a.M) return false;
    yr = s;
    xr = s / max(a.x_div, 1);
    return true;
}

__device__ __forceinline__ void gemm_row_tables(const GemmArgs& a, int start, int rows, int max_rows, i32* s_xrow,
                                                i32* s_yrow) {
    const int tid = threadIdx.x;
    if (tid < max_rows) {
        int xr = 0, yr = -1;
        if (tid >= rows || !gemm_row(a, start, tid, xr, yr)) {
            xr = 0;
            yr = -1;
        }
        s_xrow[tid] = xr;
        s_yrow[tid] = yr;
    }
    __syncthreads();
}

// The preamble of both tensor-core bodies: the argument checks (K a multiple of the K step and
// of the block), the block's first column n0, its rows (gemm_block_rows) and the row tables.
// False: the block writes nothing (block-uniform).
template <int T, int BK>
__device__ __forceinline__ bool gemm_tile_begin(const GemmArgs& a, int bn, int max_rows, int& n0, const u8*& w,
                                                i32* s_xrow, i32* s_yrow, int* rows_out = nullptr) {
    if (!gemm_args_ok(a, qt_block_elems(T) > BK ? qt_block_elems(T) : BK)) return false;
    n0 = blockIdx.x * bn;
    if (n0 >= a.N) return false;
    int start, rows;
    if (!gemm_block_rows(a, max_rows, w, start, rows)) return false;
    gemm_row_tables(a, start, rows, max_rows, s_xrow, s_yrow);
    if (rows_out) *rows_out = rows;
    return true;
}

template <int T, int BM>
__device__ __forceinline__ void gemm_body(const GemmArgs& a) {
    constexpr int BN = GEMM_BN, BK = GEMM_BK, LDS = GEMM_LDS;
    constexpr int MT = BM / 32;  // m16 tiles per warp (warp tile BM/2 x 32)
    constexpr int NT = 4;        // n8 tiles per warp
    constexpr int XV = BM / 16;  // float4 of x per thread per stage
    static_assert(BM == 32 || BM == 64 || BM == 128, "BM");
    static_assert(BN * (BK / 32) == GEMM_THREADS, "one W piece per thread per stage");

    constexpr int S = GEMM_WSTAGES, SW = Piece<T>::SLOT_WORDS;
    static_assert(SW * 4 == GEMM_SLOT_BYTES(T), "GEMM_SLOT_BYTES");

    TALLY_DYNAMIC_SMEM(smem);
    u16* As = reinterpret_cast<u16*>(smem);                   // [2][BM][LDS]
    u16* Bs = As + 2 * BM * LDS;                               // [2][BN][LDS]
    i32* s_xrow = reinterpret_cast<i32*>(Bs + 2 * BN * LDS);  // [BM] input row (valid)
    i32* s_yrow = s_xrow + BM;                                 // [BM] output row or -1
    u32* ring = reinterpret_cast<u32*>(s_yrow + BM);           // [S][SW/4][threads] x 16 bytes

    int n0;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, BN, BM, n0, w, s_xrow, s_yrow)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;

    // Loader assignments. x: float4 column c4 of rows (tid/16) + 16 i. W: row tid/2 of the
    // tile, piece (tid%2) of the stage's two.
    const int c4 = tid & 15;
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
    const float* xp[XV];
#pragma unroll
    for (int i = 0; i < XV; i++) xp[i] = a.x + static_cast<i64>(s_xrow[(tid >> 4) + 16 * i]) * a.ldx + 4 * c4;
    const int wr = tid >> 1, wj = tid & 1;
    const u8* wrow = w + static_cast<i64>(min(n0 + wr, a.N - 1)) * a.w_row_bytes;

    float4 xr[XV];
    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    // This thread's ring slot for stage kt (slot kt % S).
    auto slot = [&](int kt) { return Slot{ring + (kt % S) * (SW * GEMM_THREADS) + 4 * tid, 4 * GEMM_THREADS}; };
    auto issue_w = [&](int kt, int slot_of) {
        Piece<T> pc;
        pc.issue_async(slot(slot_of), wrow, kt * (BK / 32) + wj);
    };
    auto issue_x = [&](int kt, float4 (&xr)[XV]) {
#pragma unroll
        for (int i = 0; i < XV; i++) xr[i] = ld_x4(xp[i] + kt * BK, xvec);
    };
    auto stash = [&](int kt, int buf, const float4 (&xr)[XV]) {
        u16* A = As + buf * BM * LDS;
#pragma unroll
        for (int i = 0; i < XV; i++) {
            const int r = (tid >> 4) + 16 * i;
            *reinterpret_cast<uint2*>(A + r * LDS + 4 * c4) =
                make_uint2(pack_f16x2(xr[i].x, xr[i].y), pack_f16x2(xr[i].z, xr[i].w));
        }
        u16* B = Bs + buf * BN * LDS + wr * LDS;
        const int p = kt * (BK / 32) + wj;
        Piece<T> pc;
        pc.from_slot(slot(kt), wrow, p);
        uint4 o[4];
        pc.to_f16(p, o);
        const int s0 = piece_seg0<T>(p) - kt * BK, s1 = piece_seg1<T>(p) - kt * BK;
        *reinterpret_cast<uint4*>(B + s0) = o[0];
        *reinterpret_cast<uint4*>(B + s0 + 8) = o[1];
        *reinterpret_cast<uint4*>(B + s1) = o[2];
        *reinterpret_cast<uint4*>(B + s1 + 8) = o[3];
    };
    auto compute = [&](int buf) {
        const u16* A = As + buf * BM * LDS + (wm * (BM / 2) + (lane & 15)) * LDS + (lane >> 4) * 8;
        const u16* B = Bs + buf * BN * LDS + (wn * 32 + ((lane >> 4) << 3) + (lane & 7)) * LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            u32 af[MT][4], bf[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) ldsm_x4(A + mt * 16 * LDS + kk * 16, af[mt]);
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                u32 r[4];
                ldsm_x4(B + np * 16 * LDS + kk * 16, r);
                bf[2 * np][0] = r[0];
                bf[2 * np][1] = r[1];
                bf[2 * np + 1][0] = r[2];
                bf[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma_16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
    };

    // Pipeline: weight stage kt+S-1 goes into the ring while stage kt is multiplied; x stage
    // kt+1 into registers. One cp.async group per stage, so waiting until S-2 groups remain
    // pending means stage kt+1 has landed. Past the end, stage indices are clamped to KT-1: the
    // extra copies carry the last stage again into slots nobody reads any more, and the last
    // iteration re-stashes it into the idle f16 buffer. That keeps the loop body branch-free
    // from the MMAs to the barrier, so ptxas can schedule the conversion work between the MMAs.
    // Each thread reads back only the slot bytes it copied itself: its own wait suffices.
    const int KT = a.K / BK;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        issue_w(min(i, KT - 1), i);
        cp_async_commit();
    }
    issue_x(0, xr);
    cp_async_wait<S - 2>();
    stash(0, 0, xr);
    __syncthreads();
    for (int kt = 0; kt < KT; kt++) {
        const int buf = kt & 1, kn = min(kt + 1, KT - 1);
        issue_w(min(kt + S - 1, KT - 1), kt + S - 1);
        cp_async_commit();
        issue_x(kn, xr);
        compute(buf);
        cp_async_wait<S - 2>();
        stash(kn, buf ^ 1, xr);
        __syncthreads();
    }
    cp_async_wait<0>();

    // Epilogue: accumulator (mt, nt, q) is row g (+8 for q >= 2), columns 2*t4 + (q & 1).
    const int g = lane >> 2, t4 = lane & 3;
    const bool split = a.layout == 1;
    const bool vec2 = (reinterpret_cast<u64>(a.y) & 7u) == 0 && (a.ldy & 1) == 0 && (!split || (a.head_dim & 1) == 0);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int yr = s_yrow[wm * (BM / 2) + mt * 16 + g + 8 * hh];
            if (yr < 0) continue;
            float* yrow = a.y + static_cast<i64>(yr) * a.ldy;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int n = n0 + wn * 32 + nt * 8 + 2 * t4;
                const float v0 = acc[mt][nt][2 * hh], v1 = acc[mt][nt][2 * hh + 1];
                if (vec2 && n + 1 < a.N) {
                    *reinterpret_cast<float2*>(yrow + gemm_out_col(n, split, a.head_dim, a.n_head)) = make_float2(v0, v1);
                } else {
                    if (n < a.N) yrow[gemm_out_col(n, split, a.head_dim, a.n_head)] = v0;
                    if (n + 1 < a.N) yrow[gemm_out_col(n + 1, split, a.head_dim, a.n_head)] = v1;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// gemm_<t>_s16 / gemm_<t>_s32: the swapped tile, for few rows per tile (the routed experts at
// pp512 hold ~16 (token, expert) pairs each). The weights are the MMA's A operand (16 weight rows
// per warp, SWP_BN = 128 per block) and the x rows its n8 side (BT = 16 or 32 per block), so
// the weights never pass through shared memory as f16: each lane decodes its own two 32-element
// pieces (Piece<T>::to_f16, the front end every kernel shares) straight into A fragments.
//
// That works because the order of K inside a step is free as long as both operands use the same
// one. A K step is SWP_BK = 128 elements = pieces 4kt .. 4kt+3 of every row; lane (g, t) of a
// warp takes piece 4kt + t of weight rows g and g + 8 (of the warp's 16), i.e. 16 f16x2 pairs h[]
// each, and MMA k16 block kk uses pairs h[2kk] (k' = 16kk + 2t) and h[2kk+1] (k' = 16kk + 8 + 2t),
// exactly where m16n8k16 wants lane t's A values. The x tile is stored permuted to match:
// element 4i + e (e < 4) of piece 4kt + t lands at k' = 16i + 8(e/2) + 2t + e%2, so a float4 of x
// (4 consecutive k of one piece segment) becomes two f16x2 stores, and the B fragments come from
// shared memory by ldmatrix as usual ([token][k'] rows of SWP_LDS = 136 halves: conflict-free).
//
// Raw weight bytes go by cp.async into the thread's private slots of a SWP_STAGES-deep ring
// (two pieces per thread per stage); x (f32) into registers one stage ahead, converted and
// stashed into the idle f16 buffer after the MMAs; one __syncthreads per step (for x only).
// Grid: (ceil(N / 128), tiles) as for the other tiles (MoE: moe_route with bm = BT); 256
// threads; dynamic smem SWP_SMEM_BYTES(t, BT). Preconditions: those of gemm_<t>, with K % 128 == 0.
// Precision: as gemm_<t> (f16 operands, f32 accumulation; a different summation order).
// (SWP_BN, SWP_BK, SWP_LDS, SWP_STAGES: consts.rs.) SWP_MIN_BLOCKS: the s16 tile's blocks per
// SM bound (a lab build may set 3: <= 80 registers).
#ifndef SWP_MIN_BLOCKS
#define SWP_MIN_BLOCKS 2
#endif
#define SWP_SMEM_BYTES(t, bt) (2 * (bt) * SWP_LDS * 2 + 8 * (bt) + SWP_STAGES * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))

// The swapped tiles' weight rows of lane (g, t) in warp `warp` of a block starting at weight row
// n0: rows r0 = n0 + 16 warp + g and r0 + 8, clamped (rows past N are computed and not stored).
__device__ __forceinline__ int swap_rows(const GemmArgs& a, const u8* w, int n0, int warp, int g, const u8*& wrow0,
                                         const u8*& wrow1) {
    const int r0 = n0 + 16 * warp + g;
    wrow0 = w + static_cast<i64>(min(r0, a.N - 1)) * a.w_row_bytes;
    wrow1 = w + static_cast<i64>(min(r0 + 8, a.N - 1)) * a.w_row_bytes;
    return r0;
}

// The swapped tiles' weight copies and A side. Lane (g, t) of a warp takes piece p = 4j + t of
// its two weight rows in K step j: the four lanes t = 0..3 of a group read the same rows in the
// same 256-element block, and parts of their pieces are the same bytes. Where Piece<T>::SHARES,
// those parts are copied by one lane and read by the others from its slot (Piece's
// issue_async_shared / from_slot_shared): Q4_K's 16-byte block header by lane 0 for all four
// (80 bytes a row and K step instead of 128), Q5_K's header and its qh vectors (112 instead of
// 192), Q6_K's ql and qh windows and d by lanes 0 and 1 for lanes 2 and 3 (232 instead of 432),
// IQ4_XS's 8-byte super-block header (72 instead of 96); the formats of 32-element blocks
// (MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), whose four pieces are one contiguous span, copy
// the span's 16-byte vectors once each (Win16::issue_async_group: MXFP4 80-96 instead of 128,
// Q8_0 144-160 instead of 192).
// lab/gemm --gated on the H100: the copies, not the decode or the MMAs, bound gemm_q4_k_g32 at
// 512 tokens (docs/results/2026-12-06-stop41). Another lane's cp.async is visible only after that
// lane has waited for it and the warp has synchronised: swap_decode starts with a __syncwarp
// (after every lane's cp_async_wait, which all call sites do before decoding); and a lane
// rewrites its slot only after the others have read it (a block barrier or, without one, the
// next decode's __syncwarp in between).
template <int T>
__device__ __forceinline__ constexpr bool swap_shared() {
    return PieceShares<Piece<T>>::value;
}
template <int T>
__device__ __forceinline__ void swap_issue(const Slot& s0, const Slot& s1, const u8* wrow0, const u8* wrow1, int p,
                                           int t) {
    Piece<T> pc;
    if constexpr (swap_shared<T>()) {
        pc.issue_async_shared(s0, wrow0, p, t);
        pc.issue_async_shared(s1, wrow1, p, t);
    } else {
        pc.issue_async(s0, wrow0, p);
        pc.issue_async(s1, wrow1, p);
    }
}
// One weight row: piece p, read back from the ring slot, as f16 pairs in piece order (h[i] =
// elements 2i, 2i + 1: o[0..1] the piece's first segment, o[2..3] its second).
template <int T>
__device__ __forceinline__ void swap_decode_row(const Slot& s, const u8* wrow, int p, int t, u32 (&h)[16]) {
    Piece<T> pc;
    uint4 o[4];
    if constexpr (swap_shared<T>()) pc.from_slot_shared(s, wrow, p, t);
    else pc.from_slot(s, wrow, p);
    pc.to_f16(p, o);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        h[4 * i] = o[i].x;
        h[4 * i + 1] = o[i].y;
        h[4 * i + 2] = o[i].z;
        h[4 * i + 3] = o[i].w;
    }
}

// Both weight rows of a lane (rows g and g + 8 of its warp's 16: A fragments a0/a2 and a1/a3).
template <int T>
__device__ __forceinline__ void swap_decode(const Slot& s0, const Slot& s1, const u8* wrow0, const u8* wrow1, int p,
                                            int t, u32 (&h0)[16], u32 (&h1)[16]) {
    if constexpr (swap_shared<T>()) __syncwarp();
    swap_decode_row<T>(s0, wrow0, p, t, h0);
    swap_decode_row<T>(s1, wrow1, p, t, h1);
}

template <int T, int NT8>
__device__ __forceinline__ void gemm_swap_body(const GemmArgs& a) {
    constexpr int BT = 8 * NT8, BN = SWP_BN, BK = SWP_BK, LDS = SWP_LDS, S = SWP_STAGES;
    constexpr int SW = Piece<T>::SLOT_WORDS;
    constexpr int XV = BT / 8;  // float4 of x per thread per stage
    static_assert(NT8 == 2 || NT8 == 4, "tokens per tile: 16 or 32");
    static_assert(BN == 16 * (GEMM_THREADS / 32), "16 weight rows per warp");
    static_assert(SW * 4 == GEMM_SLOT_BYTES(T), "GEMM_SLOT_BYTES");

    TALLY_DYNAMIC_SMEM(smem);
    u16* Xs = reinterpret_cast<u16*>(smem);                   // [2][BT][LDS]
    i32* s_xrow = reinterpret_cast<i32*>(Xs + 2 * BT * LDS);  // [BT] input row (valid)
    i32* s_yrow = s_xrow + BT;                                 // [BT] output row or -1
    u32* ring = reinterpret_cast<u32*>(s_yrow + BT);           // [S][2][SW/4][threads] x 16 bytes

    int n0;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, BN, BT, n0, w, s_xrow, s_yrow)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

    const u8 *wrow0, *wrow1;
    const int r0 = swap_rows(a, w, n0, warp, g, wrow0, wrow1);
    // x loader: token rows (tid >> 5) + 8i; float4 i4 (elements 4 i4 .. 4 i4 + 3) of piece tq.
    const int tq = (tid & 31) >> 3, i4 = tid & 7;
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
    const float* xp[XV];
#pragma unroll
    for (int i = 0; i < XV; i++) xp[i] = a.x + static_cast<i64>(s_xrow[(tid >> 5) + 8 * i]) * a.ldx;

    float4 xr[XV];
    u32 h0[16], h1[16];
    float acc[NT8][4];
#pragma unroll
    for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[j][q] = 0.0f;

    auto slot = [&](int kt, int j) {
        return Slot{ring + (kt % S) * (2 * SW * GEMM_THREADS) + j * (SW * GEMM_THREADS) + 4 * tid, 4 * GEMM_THREADS};
    };
    auto issue_w = [&](int kt, int slot_of) { swap_issue<T>(slot(slot_of, 0), slot(slot_of, 1), wrow0, wrow1, 4 * kt + t, t); };
    auto issue_x = [&](int kt) {
        const int p = 4 * kt + tq;
        const int k = (i4 < 4 ? piece_seg0<T>(p) : piece_seg1<T>(p)) + 4 * (i4 & 3);
#pragma unroll
        for (int i = 0; i < XV; i++) xr[i] = ld_x4(xp[i] + k, xvec);
    };
    auto stash_x = [&](int buf) {
        u16* X = Xs + buf * BT * LDS;
#pragma unroll
        for (int i = 0; i < XV; i++) {
            u16* row = X + ((tid >> 5) + 8 * i) * LDS;
            *reinterpret_cast<u32*>(row + 16 * i4 + 2 * tq) = pack_f16x2(xr[i].x, xr[i].y);
            *reinterpret_cast<u32*>(row + 16 * i4 + 8 + 2 * tq) = pack_f16x2(xr[i].z, xr[i].w);
        }
    };
    auto decode_w = [&](int kt) { swap_decode<T>(slot(kt, 0), slot(kt, 1), wrow0, wrow1, 4 * kt + t, t, h0, h1); };
    auto compute = [&](int buf) {
        const u16* X = Xs + buf * BT * LDS + (((lane >> 4) << 3) + (lane & 7)) * LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            const u32 af[4] = {h0[2 * kk], h1[2 * kk], h0[2 * kk + 1], h1[2 * kk + 1]};
#pragma unroll
            for (int np = 0; np < NT8 / 2; np++) {
                u32 r[4];
                ldsm_x4(X + np * 16 * LDS + kk * 16, r);
                mma_16816(acc[2 * np], af, r[0], r[1]);
                mma_16816(acc[2 * np + 1], af, r[2], r[3]);
            }
        }
    };

    // Pipeline as in gemm_body (stage indices clamped past the end; one cp.async group per
    // stage; each thread reads back only its own slots, so only the x buffers need the barrier).
    const int KT = a.K / BK;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        issue_w(min(i, KT - 1), i);
        cp_async_commit();
    }
    issue_x(0);
    cp_async_wait<S - 2>();
    decode_w(0);
    stash_x(0);
    __syncthreads();
    for (int kt = 0; kt < KT; kt++) {
        const int buf = kt & 1, kn = min(kt + 1, KT - 1);
        issue_w(min(kt + S - 1, KT - 1), kt + S - 1);
        cp_async_commit();
        issue_x(kn);
        compute(buf);
        cp_async_wait<S - 2>();
        decode_w(kn);
        stash_x(buf ^ 1);
        __syncthreads();
    }
    cp_async_wait<0>();

    // Epilogue: acc[j][e] is weight row r0 + 8 (e >> 1) (output column), token 8j + 2t + (e & 1).
    const bool split = a.layout == 1;
#pragma unroll
    for (int j = 0; j < NT8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int yr = s_yrow[8 * j + 2 * t + (e & 1)];
            const int n = r0 + 8 * (e >> 1);
            if (yr < 0 || n >= a.N) continue;
            a.y[static_cast<i64>(yr) * a.ldy + gemm_out_col(n, split, a.head_dim, a.n_head)] = acc[j][e];
        }
    }
}

#include "gemm_wg.cuh"

// Piece p's 32 x values of row xr (its two segments, piece_seg0 / piece_seg1) and each
// segment's sum, in the order both f32 GEMV bodies (gemv_body, mmv_body) add them.
template <int T>
__device__ __forceinline__ void gemv_x_piece(const float* xr, int p, bool xvec, float (&xv)[32], float& xs0,
                                             float& xs1) {
    const int s0 = piece_seg0<T>(p), s1 = piece_seg1<T>(p);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float4 u = ld_x4(xr + s0 + 4 * j, xvec), v = ld_x4(xr + s1 + 4 * j, xvec);
        xv[4 * j] = u.x;
        xv[4 * j + 1] = u.y;
        xv[4 * j + 2] = u.z;
        xv[4 * j + 3] = u.w;
        xv[16 + 4 * j] = v.x;
        xv[16 + 4 * j + 1] = v.y;
        xv[16 + 4 * j + 2] = v.z;
        xv[16 + 4 * j + 3] = v.w;
    }
    xs0 = 0.0f;
    xs1 = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        xs0 += xv[j];
        xs1 += xv[16 + j];
    }
}

// The GEMV warp's weight rows: columns nb .. nb + RW - 1 (clamped to the last row), or (paired,
// RW = 2) row nb of the gate weight and of the up weight, the same expert (w is the block's
// expert base in a.w).
template <int RW>
__device__ __forceinline__ void gemv_weight_rows(const GemmArgs& a, const u8* w, bool paired, int nb, const u8* wrow[RW]) {
    const int nc = min(nb, a.N - 1);
    if (paired) {
        const i64 off = static_cast<i64>(nc) * a.w_row_bytes;
        wrow[0] = w + off;
        wrow[RW - 1] = a.w2 + (w - a.w) + off;
    } else {
#pragma unroll
        for (int r = 0; r < RW; r++) wrow[r] = w + static_cast<i64>(min(nc + r, a.N - 1)) * a.w_row_bytes;
    }
}

// The weight bytes GEMV block bx reads: its rows of w (and of w2, paired) at rw rows per warp,
// from the parameters alone (pdl_enter_prefetch). w is the block's expert base (a.w if dense).
__device__ __forceinline__ L2Ranges gemv_block_range(const GemmArgs& a, const u8* w, int bx, int rw) {
    L2Ranges r = {{nullptr, nullptr}, {0, 0}};
    const bool paired = rw == 2 && a.w2 != nullptr;
    const int per = (paired ? 1 : rw) * static_cast<int>(blockDim.x >> 5);
    const int n0 = bx * per, n1 = min(n0 + per, a.N);
    if (n0 >= n1 || w == nullptr) return r;
    const i64 off = static_cast<i64>(n0) * a.w_row_bytes;
    r.p[0] = w + off;
    r.bytes[0] = static_cast<i64>(n1 - n0) * a.w_row_bytes;
    if (paired) {
        r.p[1] = a.w2 + (w - a.w) + off;
        r.bytes[1] = r.bytes[0];
    }
    return r;
}

// A dense GEMV's prefetch (a MoE one's weights depend on the router's output, which the
// parameters do not hold: nothing); x rows past the first (grid.y) read the same weights.
__device__ __forceinline__ L2Ranges gemv_dense_range(const GemmArgs& a, int bx, int rw) {
    if (a.tile_expert != nullptr || a.sorted_rows != nullptr || blockIdx.y != 0) return L2Ranges{{nullptr, nullptr}, {0, 0}};
    return gemv_block_range(a, a.w, bx, rw);
}

// The GEMV warp's outputs of one row: the lanes' partial sums reduced, then (paired) y, y2 and
// y3 = silu(y) * y2 of column nb, or y of columns nb .. nb + RW - 1 that exist.
template <int RW>
__device__ __forceinline__ void gemv_store(const GemmArgs& a, bool paired, const float acc[RW], int lane, int nb,
                                           int yrow) {
    if (paired) {
        const float g = warp_sum(acc[0]), u = warp_sum(acc[RW - 1]);
        if (lane == 0) {
            a.y[static_cast<i64>(yrow) * a.ldy + nb] = g;
            a.y2[static_cast<i64>(yrow) * a.ldy2 + nb] = u;
            if (a.y3) a.y3[static_cast<i64>(yrow) * a.ldy3 + nb] = tally_silu(g) * u;
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < RW; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && nb + r < a.N)
            a.y[static_cast<i64>(yrow) * a.ldy + gemm_out_col(nb + r, a.layout == 1, a.head_dim, a.n_head)] = s;
    }
}

// The integer GEMV's input: one x row quantised to int16 per segment of 16 elements (the
// segments of the pieces of gemv's type), in shared memory, stored by piece: piece p's 32 values
// are the four 16-byte units 4p + (u ^ ((p >> 1) & 3)), u = 2 * segment + half (the swizzle puts
// the eight lanes of a quarter-warp, pieces p .. p + 7, on eight distinct bank groups), and its
// metadata m[p] = {dx bits, isum} of segment 0, then of segment 1: the row's values are
// x_i ~ dx * q_i, |q_i| <= 32767, isum = sum of the segment's q_i (exact).
struct GemvX {
    uint4 q[GEMV_QK_MAX / 8];
    uint4 m[GEMV_QK_MAX / 32];
};
__device__ __forceinline__ GemvX& gemv_x_smem() {
    __shared__ __align__(16) GemvX s;
    return s;
}

// The codebook formats' integer GEMV takes a piece's bytes in their interleaved order
// (to_bytes_il: elements m and m + 16 side by side, Codebook::word_il), so their x is stored in
// that order too: unit u of piece p holds x[32p + 4c + j], x[32p + 16 + 4c + j] as word 4c + j's
// two halves (c = u here, j = 0..3), segment 0 = elements 0..7 and 16..23. Every other format:
// to_bytes's order, x[seg + 8 * half + i] in unit 2 * seg + half.
template <int T>
__device__ __forceinline__ constexpr bool gemv_il() {
    return T == QT_IQ4_NL || T == QT_IQ4_XS || T == QT_MXFP4;
}
template <int T>
__device__ __forceinline__ constexpr int gemv_zo() {
    if constexpr (gemv_il<T>()) {
        return Piece<T>::ZO_IL;
    } else {
        return Piece<T>::ZO;
    }
}
template <int T>
__device__ __forceinline__ void gemv_bytes(const Piece<T>& pc, int p, u32 b[8], float sc[2], float off[2]) {
    if constexpr (gemv_il<T>()) {
        pc.to_bytes_il(p, b, sc, off);
    } else {
        pc.to_bytes(p, b, sc, off);
    }
}

// The f32 GEMV bodies' piece values (piece_parts, or for the interleaved formats their bytes in
// to_bytes_il's order as floats; these formats have one scale and no offset a piece): value t
// multiplies x element gemv_elem<T>(t) of the piece.
template <int T>
__device__ __forceinline__ constexpr int gemv_elem(int t) {
    return gemv_il<T>() ? t / 2 + 16 * (t & 1) : t;
}
template <int T>
__device__ __forceinline__ void gemv_parts(const Piece<T>& pc, int p, float v[32], float sc[2], float off[2]) {
    if constexpr (gemv_il<T>()) {
        u32 b[8];
        pc.to_bytes_il(p, b, sc, off);
#pragma unroll
        for (int i = 0; i < 8; i++) bytes_to_f32<Piece<T>::ZO_IL>(b[i], v + 4 * i);
    } else {
        piece_parts<T>(pc, p, v, sc, off);
    }
}

// Quantises row xr (K elements) into sx; every thread of the block takes part (no barriers
// inside: the caller's bracket it). Thread h of a pass takes elements 8h .. 8h + 7 (the
// interleaved formats: see gemv_il), its partner h ^ 1 (lane ^ 1) the other half of the
// segment. A segment holding a NaN or an infinity gets dx = NaN, so the outputs that read it
// are NaN (as the f32 sums would be).
template <int T>
__device__ __forceinline__ void gemv_quantize_x(const float* xr, int K, bool xvec, uint4* sq, uint4* sm) {
    const int halves = K / 8;
    for (int base = 0; base < halves; base += static_cast<int>(blockDim.x)) {
        const int h = base + static_cast<int>(threadIdx.x);
        const bool on = h < halves;
        // Interleaved (gemv_il): thread h = 4p + c takes x[32p + 4c ..] and x[32p + 16 + 4c ..].
        const int e0 = gemv_il<T>() ? 32 * (h >> 2) + 4 * (h & 3) : 8 * h;
        const int e1 = gemv_il<T>() ? e0 + 16 : e0 + 4;
        const float4 a = on ? ld_x4(xr + e0, xvec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float4 b = on ? ld_x4(xr + e1, xvec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const bool il = gemv_il<T>();
        const float v[8] = {a.x, il ? b.x : a.y, il ? a.y : a.z, il ? b.y : a.w,
                            il ? a.z : b.x, il ? b.z : b.y, il ? a.w : b.z, b.w};
        float amax = 0.0f;
        int bad = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            amax = fmaxf(amax, fabsf(v[i]));
            bad |= !(fabsf(v[i]) <= 3.402823466e38f);
        }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
        // q = rint(x * inv), x ~ q * dx with dx = 1 / inv up to rounding; below amax =
        // 32767 * 2^-126 the step is the smallest normal float, 2^-126 (32767 / amax would
        // overflow, and a subnormal dx would lose its bits).
        const bool tiny = amax < 32767.0f * 1.17549435e-38f;
        const float inv = amax == 0.0f || bad ? 0.0f : tiny ? __uint_as_float(0x7e800000u) : 32767.0f / amax;
        const float dx = tiny ? 1.17549435e-38f : amax / 32767.0f;
        int q[8], sum = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[i] = max(-32767, min(32767, __float2int_rn(v[i] * inv)));
            sum += q[i];
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (!on) continue;
        const int g = h >> 1, half = h & 1;
        // Piece and segment of segment g of the row (piece_seg0 / piece_seg1 inverted).
        const int p = qt_is_kquant(T) ? 2 * (g >> 2) + (g & 1) : g >> 1;
        const int seg = qt_is_kquant(T) ? (g >> 1) & 1 : g & 1;
        const int u = 2 * seg + half;
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = (static_cast<u32>(q[2 * k]) & 0xffffu) | (static_cast<u32>(q[2 * k + 1]) << 16);
        sq[4 * p + (u ^ ((p >> 1) & 3))] = make_uint4(w[0], w[1], w[2], w[3]);
        if (half == 0) {
            u32* m = reinterpret_cast<u32*>(&sm[p]);
            m[2 * seg] = bad ? 0x7fc00000u : __float_as_uint(dx);
            m[2 * seg + 1] = static_cast<u32>(sum);
        }
    }
}

// Piece p of a quantised x row in shared memory (gemv_quantize_x's layout: units sq, swizzled):
// its 32 int16 values as 16 words of pairs.
__device__ __forceinline__ void gemv_x_piece(const uint4* sq, int p, u32 (&xw)[16]) {
    const int sw = (p >> 1) & 3;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const uint4 t = sq[4 * p + (u ^ sw)];
        xw[4 * u] = t.x;
        xw[4 * u + 1] = t.y;
        xw[4 * u + 2] = t.z;
        xw[4 * u + 3] = t.w;
    }
}

// One weight piece (bytes b, scales sc, offsets off of its two segments; zero point ZO) against
// x piece xw with metadata m = {dx0 bits, isum0, dx1 bits, isum1}: dp2a over each segment, then
// sum over the segments of dx * (sc * (dot - ZO * isum) + off * isum), in f32.
template <int ZO>
__device__ __forceinline__ float gemv_piece_dot(const u32 (&xw)[16], const uint4& m, const u32* b, const float* sc,
                                                const float* off) {
    const float dx0 = __uint_as_float(m.x), dx1 = __uint_as_float(m.z);
    const int is0 = static_cast<int>(m.y), is1 = static_cast<int>(m.w);
    int d0 = 0, d1 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        d0 = dp2a_lo(xw[2 * j], b[j], d0);
        d0 = dp2a_hi(xw[2 * j + 1], b[j], d0);
        d1 = dp2a_lo(xw[8 + 2 * j], b[4 + j], d1);
        d1 = dp2a_hi(xw[8 + 2 * j + 1], b[4 + j], d1);
    }
    return dx0 * (sc[0] * static_cast<float>(d0 - ZO * is0) + off[0] * static_cast<float>(is0)) +
           dx1 * (sc[1] * static_cast<float>(d1 - ZO * is1) + off[1] * static_cast<float>(is1));
}

// Integer GEMV (the integer formats, K <= GEMV_QK_MAX): gemv_body's warps, rows, pieces, lanes
// and outputs, with x quantised once per block and row into shared memory (gemv_quantize_x) and
// each segment's dot product in integers: dp2a (two int16 x two bytes per instruction) over the
// piece's bytes (to_bytes), then sum over the segment of dx * (sc * (dot - ZO * isum) + off *
// isum), in f32. Against the f32 body: about a third of the instructions per weight byte (no
// byte-to-float conversions, two products per instruction), x read from shared memory; error
// ~1e-5 relative (x rounded to 16 bits per 16 elements), exact integer sums otherwise.
template <int T, int RW>
__device__ __forceinline__ void gemv_int_body(const GemmArgs& a, const int bx) {
    const bool paired = RW == 2 && a.w2 != nullptr;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = static_cast<int>(blockDim.x >> 5);
    const int nb = paired ? bx * warps + warp : bx * (warps * RW) + warp * RW;
    const bool live = nb < a.N;  // warp-uniform; every warp still takes part in the barriers
    const u8* w;
    int start, rows;
    if (!gemm_block_rows(a, a.tile_expert ? 0x7fffffff : 1, w, start, rows)) return;  // block-uniform
    if (a.tile_expert) {  // the expert is known now: stream the block's rows into L2
        const L2Ranges pr = gemv_block_range(a, w, bx, RW);
        l2_prefetch(pr.p[0], pr.bytes[0]);
        l2_prefetch(pr.p[1], pr.bytes[1]);
    }
    const u8* wrow[RW];
    gemv_weight_rows<RW>(a, w, paired, nb, wrow);
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
    const int P = a.K / 32;
    constexpr int ZO = gemv_zo<T>();
    GemvX& sx = gemv_x_smem();

    for (int i = 0; i < rows; i++) {
        int xrow, yrow;
        if (!gemm_row(a, start, i, xrow, yrow)) continue;  // block-uniform
        Piece<T> pc[RW];
        // The first piece's loads go out before x is quantised.
        if (live && lane < P) {
#pragma unroll
            for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], lane);
        }
        __syncthreads();  // the previous row's readers are done with sx
        gemv_quantize_x<T>(a.x + static_cast<i64>(xrow) * a.ldx, a.K, xvec, sx.q, sx.m);
        __syncthreads();
        if (!live) continue;
        float acc[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] = 0.0f;
        for (int p = lane; p < P; p += 32) {
            if (p != lane) {
#pragma unroll
                for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], p);
            }
            u32 xw[16];
            gemv_x_piece(sx.q, p, xw);
            const uint4 m = sx.m[p];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                u32 b[8];
                float sc[2], off[2];
                gemv_bytes<T>(pc[r], p, b, sc, off);
                acc[r] += gemv_piece_dot<ZO>(xw, m, b, sc, off);
            }
        }
        gemv_store<RW>(a, paired, acc, lane, nb, yrow);
    }
}

// One weight piece p of RW rows against M <= MR quantised x rows (gemv_quantize_x's layout: row
// j's units at sq + 4 P j, its metadata at sm + P j): each row's piece converted once, then x
// row by x row, each (x row, weight row) sum with gemv_int_body's expression.
template <int T, int MR, int RW>
__device__ __forceinline__ void gemv_piece_rows(const Piece<T> (&pc)[RW], int p, const uint4* sq, const uint4* sm,
                                                int P, int M, float (&acc)[MR][RW]) {
    constexpr int ZO = gemv_zo<T>();
    u32 b[RW][8];
    float sc[RW][2], off[RW][2];
#pragma unroll
    for (int r = 0; r < RW; r++) gemv_bytes<T>(pc[r], p, b[r], sc[r], off[r]);
#pragma unroll
    for (int j = 0; j < MR; j++) {
        if (j >= M) break;
        u32 xw[16];
        gemv_x_piece(sq + 4 * P * j, p, xw);
        const uint4 m = sm[P * j + p];
#pragma unroll
        for (int r = 0; r < RW; r++) acc[j][r] += gemv_piece_dot<ZO>(xw, m, b[r], sc[r], off[r]);
    }
}

// The integer GEMV over up to MR x rows at once, persistent (gemvr_<t>: MR = 1 and 4 weight rows
// a warp, gemvr4_<t>: MR = 4 and 2 weight rows a warp, which keeps its converted pieces in
// registers without spilling): dense only, K <= GEMVR_K_MAX, M <= MR. Every x row is quantised
// once per block into dynamic shared memory (gemv_quantize_x: row j's units at 4 P j, its
// metadata after all units), then the block walks row groups bx = blockIdx.x, + gridDim.x, ...
// (gemv_<t>'s or gemv4_<t>'s columns): each weight piece is loaded and converted once and taken
// against all M rows, and a group's first pieces are loaded before the previous group's sums
// are reduced. Per (x row, weight row) the pieces, lanes, order and expressions are
// gemv_int_body's, so every output is gemv_<t>'s and gemv4_<t>'s bit for bit (their sums do not
// depend on the rows a warp takes): a verification batch's rows equal one-token steps'.
// Against gemv4_<t> (one block per row group and x row): the head (248,320 rows) quantised x in
// each of its 7,760 blocks per token and read its 417 MB once per x row.
// Dynamic shared memory: gemvr_smem_bytes(K, M) = M * (K / 8 + K / 32) * 16.
template <int T, int MR, int RW>
__device__ __forceinline__ void gemvr_body(const GemmArgs& a) {
    if constexpr (qt_has_bytes(T)) {
        if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
        if (a.tile_expert || a.M > MR || a.K > GEMVR_K_MAX || a.w2) return;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = static_cast<int>(blockDim.x >> 5);
        const int M = a.M, P = a.K / 32;
        const int groups = (a.N + warps * RW - 1) / (warps * RW);
        constexpr int ZO = gemv_zo<T>();
        TALLY_DYNAMIC_SMEM(gemvr_raw);
        uint4* sq = reinterpret_cast<uint4*>(gemvr_raw);
        uint4* sm = sq + 4 * P * M;
        int bx = static_cast<int>(blockIdx.x);
        const u8* wrow[RW];
        gemv_weight_rows<RW>(a, a.w, false, bx * (warps * RW) + warp * RW, wrow);
        Piece<T> pc[RW];
        // The first group's first pieces go out before x is quantised.
        if (lane < P && bx < groups) {
#pragma unroll
            for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], lane);
        }
        const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
        for (int j = 0; j < M; j++)
            gemv_quantize_x<T>(a.x + static_cast<i64>(j) * a.ldx, a.K, xvec, sq + 4 * P * j, sm + P * j);
        __syncthreads();
        while (bx < groups) {  // no barriers from here on
            const int nb = bx * (warps * RW) + warp * RW;
            float acc[MR][RW];
#pragma unroll
            for (int j = 0; j < MR; j++)
#pragma unroll
                for (int r = 0; r < RW; r++) acc[j][r] = 0.0f;
            for (int p = lane; p < P; p += 32) {
                if (p != lane) {
#pragma unroll
                    for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], p);
                }
                if constexpr (MR == 1) {  // gemv_int_body's order: x once, then row by row
                    u32 xw[16];
                    gemv_x_piece(sq, p, xw);
                    const uint4 m = sm[p];
#pragma unroll
                    for (int r = 0; r < RW; r++) {
                        u32 b[8];
                        float sc[2], off[2];
                        gemv_bytes<T>(pc[r], p, b, sc, off);
                        acc[0][r] += gemv_piece_dot<ZO>(xw, m, b, sc, off);
                    }
                } else {  // every row's piece converted once, then x row by x row
                    gemv_piece_rows<T, MR, RW>(pc, p, sq, sm, P, M, acc);
                }
            }
            // The next group's first pieces, then this group's sums.
            const int next = bx + static_cast<int>(gridDim.x);
            if (next < groups) {
                gemv_weight_rows<RW>(a, a.w, false, next * (warps * RW) + warp * RW, wrow);
                if (lane < P) {
#pragma unroll
                    for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], lane);
                }
            }
#pragma unroll
            for (int j = 0; j < MR; j++) {
                if (j >= M) break;
                gemv_store<RW>(a, false, acc[j], lane, nb, j);
            }
            bx = next;
        }
    }
}

// gemvr_<t>'s / gemvr4_<t>'s GEMV of up to MR x rows fed by bulk copies (gemvt_<t>, gemvt2_<t>:
// one x row, 4 or 2 weight rows a warp; gemvt4_<t>: up to 4 x rows, 2 weight rows a warp, as
// gemvr4_<t>): the same row groups, lanes, pieces and expressions, so every output is gemvr's
// (and gemv4_<t>'s) bit for bit, but each warp's RW weight rows (contiguous in memory) arrive in
// shared memory by one cp.async.bulk into a ring of S stages per warp, S groups ahead, and the
// lanes take their pieces from there (Piece<T>::issue<LdS>). gemvr_<t> asked the load units for
// every piece of every lane (15 to 18 narrow loads per Q6_K piece); here a group is one bulk
// copy, and the loads in flight do not live in registers. Dense, M <= MR, K <= GEMVR_K_MAX, row bytes and w 16-byte aligned (the
// host checks; anything else returns at once). Dynamic shared memory, gemvt_smem_bytes(K, rb,
// warps, M): the quantised x rows (gemvr_body's layout), S mbarriers a warp, then the rings (RW x
// rb bytes a stage) and 16 bytes of slack (Win16 reads whole vectors).
template <int T, int MR, int RW, int S>
__device__ __forceinline__ void gemvt_body(const GemmArgs& a) {
    if constexpr (qt_has_bytes(T)) {
        if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
        if (a.tile_expert || a.M < 1 || a.M > MR || a.K > GEMVR_K_MAX || a.w2 || (a.w_row_bytes & 15) ||
            (reinterpret_cast<u64>(a.w) & 15u))
            return;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = static_cast<int>(blockDim.x >> 5);
        const int P = a.K / 32, N = a.N, M = a.M;
        const i64 rb = a.w_row_bytes;
        constexpr int ZO = gemv_zo<T>();
        TALLY_DYNAMIC_SMEM(gemvt_raw);
        uint4* sq = reinterpret_cast<uint4*>(gemvt_raw);
        uint4* sm = sq + 4 * P * M;
        const int xbytes = M * P * 5 * 16;  // (K / 8 + K / 32) units of 16 bytes a row
        const u32 bar0 = smem_u32(gemvt_raw + xbytes) + static_cast<u32>(8 * S * warp);
        u8* ring = gemvt_raw + xbytes + 8 * S * warps + static_cast<i64>(warp) * S * RW * rb;
        // Group i of this warp: the block's group blockIdx.x + i gridDim.x, this warp's rows of it.
        auto first_row = [&](int i) { return (static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x)) * (warps * RW) + warp * RW; };
        auto issue = [&](int i) {  // lane 0: group i's rows into stage i % S
            const int nb = first_row(i);
            if (nb >= N) return;
            const int s = i % S;
            const u32 bytes = static_cast<u32>(min(RW, N - nb) * rb);
            mbar_expect_tx(bar0 + 8 * s, bytes);
            bulk_g2s(smem_u32(ring + s * RW * rb), a.w + static_cast<i64>(nb) * rb, bytes, bar0 + 8 * s);
        };
        if (lane == 0) {
#pragma unroll
            for (int s = 0; s < S; s++) mbar_init(bar0 + 8 * s, 1);
            mbar_init_fence();
#pragma unroll
            for (int s = 0; s < S; s++) issue(s);
        }
        const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
        for (int j = 0; j < M; j++)
            gemv_quantize_x<T>(a.x + static_cast<i64>(j) * a.ldx, a.K, xvec, sq + 4 * P * j, sm + P * j);
        __syncthreads();  // x and the barriers' initialisation; no barriers from here on
        for (int i = 0;; i++) {
            const int nb = first_row(i);
            if (nb >= N) break;
            const int s = i % S;
            mbar_wait(bar0 + 8 * s, static_cast<u32>((i / S) & 1));
            const int nr = min(RW, N - nb);
            const u8* srow[RW];
#pragma unroll
            for (int r = 0; r < RW; r++) srow[r] = ring + (s * RW + min(r, nr - 1)) * rb;
            float acc[MR][RW];
#pragma unroll
            for (int j = 0; j < MR; j++)
#pragma unroll
                for (int r = 0; r < RW; r++) acc[j][r] = 0.0f;
            for (int p = lane; p < P; p += 32) {
                if constexpr (MR == 1) {  // gemv_int_body's order: x once, then row by row
                    u32 xw[16];
                    gemv_x_piece(sq, p, xw);
                    const uint4 m = sm[p];
#pragma unroll
                    for (int r = 0; r < RW; r++) {
                        Piece<T> pc;
                        pc.template issue<LdS>(srow[r], p);
                        u32 b[8];
                        float sc[2], off[2];
                        gemv_bytes<T>(pc, p, b, sc, off);
                        acc[0][r] += gemv_piece_dot<ZO>(xw, m, b, sc, off);
                    }
                } else {  // gemvr4's: every row's piece converted once, then x row by x row
                    Piece<T> pc[RW];
#pragma unroll
                    for (int r = 0; r < RW; r++) pc[r].template issue<LdS>(srow[r], p);
                    gemv_piece_rows<T, MR, RW>(pc, p, sq, sm, P, M, acc);
                }
            }
            __syncwarp();  // every lane is done with stage s
            if (lane == 0) issue(i + S);
#pragma unroll
            for (int j = 0; j < MR; j++) {
                if (j >= M) break;
                gemv_store<RW>(a, false, acc[j], lane, nb, j);
            }
        }
    }
}

// Integer GEMV of M <= MR x rows in one block (gemv_multi_<t> with MultiGemvArgs::mr > 1: the
// in-projections of a verification batch in one fused launch): every x row is quantised once per
// block into gemv_x_smem (row j's units at 4 P j, its metadata at P j, gemvr_body's layout, so K
// <= GEMV_QK_MAX / MR), then each weight piece is loaded and converted once and taken against all
// M rows. Per (x row, weight row) the pieces, lanes, order and expressions are gemv_int_body's, so
// every output is gemv_<t>'s bit for bit: a verification batch's rows equal one-token steps'.
// Against a block per x row (grid.y = M): the weight bytes and their conversion once instead of M
// times, M - 1 fewer blocks quantising nothing new. Dense only; a violated precondition writes
// nothing.
template <int T, int RW, int MR>
__device__ __forceinline__ void gemv_int_mr_body(const GemmArgs& a, const int bx, const int M) {
    if constexpr (qt_has_bytes(T)) {
        if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
        if (a.tile_expert || M < 1 || M > MR || a.M != M || a.K > GEMV_QK_MAX / MR) return;  // block-uniform
        const bool paired = RW == 2 && a.w2 != nullptr;
        if (paired && (a.layout != 0 || !a.y2)) return;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = static_cast<int>(blockDim.x >> 5);
        const int nb = paired ? bx * warps + warp : bx * (warps * RW) + warp * RW;
        const bool live = nb < a.N;  // warp-uniform; every warp still takes part in the barrier
        const u8* wrow[RW];
        gemv_weight_rows<RW>(a, a.w, paired, nb, wrow);
        const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
        const int P = a.K / 32;
        GemvX& sx = gemv_x_smem();
        Piece<T> pc[RW];
        // The first pieces' loads go out before x is quantised.
        if (live && lane < P) {
#pragma unroll
            for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], lane);
        }
        for (int j = 0; j < M; j++)
            gemv_quantize_x<T>(a.x + static_cast<i64>(j) * a.ldx, a.K, xvec, sx.q + 4 * P * j, sx.m + P * j);
        __syncthreads();
        if (!live) return;  // no barriers below
        float acc[MR][RW];
#pragma unroll
        for (int j = 0; j < MR; j++)
#pragma unroll
            for (int r = 0; r < RW; r++) acc[j][r] = 0.0f;
        for (int p = lane; p < P; p += 32) {
            if (p != lane) {
#pragma unroll
                for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], p);
            }
            gemv_piece_rows<T, MR, RW>(pc, p, sx.q, sx.m, P, M, acc);
        }
#pragma unroll
        for (int j = 0; j < MR; j++) {
            if (j >= M) break;
            gemv_store<RW>(a, paired, acc[j], lane, nb, j);
        }
    }
}

// f32 GEMV: warp w of the block owns RW weight rows (gemv_<t>: 2, gemv4_<t>: 4) from
// blockIdx.x * warps * RW + RW * w; its lanes take pieces p = lane, lane + 32, ... of every row,
// each x element loaded once for the RW rows (the x loads through L1 were 8x the Q4_K weight
// bytes at RW = 2: ncu put the decode GEMVs at 62% of L1 throughput; RW = 4 takes the 8192-row
// qkv from 11.5 to 8.9 us on the H200, but halves the blocks of shorter N). Each row's sum is the
// same at any RW (same pieces, lanes and order).
// Per piece and segment s: sum_i x_i * (sc_s * v_i + off_s) = sc_s * (x . v) + off_s * sum(x).
template <int T, int RW = 2>
__device__ __forceinline__ void gemv_body(const GemmArgs& a, const int bx = static_cast<int>(blockIdx.x)) {
    static_assert(RW == 2 || RW == 4, "rows per warp");
    if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
    const bool paired = RW == 2 && a.w2 != nullptr;
    if (paired && (a.layout != 0 || !a.y2)) return;
    if constexpr (qt_has_bytes(T)) {
        if (a.K <= GEMV_QK_MAX) {
            gemv_int_body<T, RW>(a, bx);
            return;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = static_cast<int>(blockDim.x >> 5);
    // RW rows per warp: columns nb .. nb + RW - 1, or (paired, RW = 2) gate and up rows of
    // column nb.
    const int nb = paired ? bx * warps + warp : bx * (warps * RW) + warp * RW;
    if (nb >= a.N) return;  // warp-uniform; no block-wide barriers below
    const u8* w;
    int start, rows;
    if (!gemm_block_rows(a, a.tile_expert ? 0x7fffffff : 1, w, start, rows)) return;
    const u8* wrow[RW];
    gemv_weight_rows<RW>(a, w, paired, nb, wrow);
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
    const int P = a.K / 32;

    for (int i = 0; i < rows; i++) {
        int xrow, yrow;
        if (!gemm_row(a, start, i, xrow, yrow)) continue;
        const float* xr = a.x + static_cast<i64>(xrow) * a.ldx;
        float acc[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] = 0.0f;
        for (int p = lane; p < P; p += 32) {
            Piece<T> pc[RW];
#pragma unroll
            for (int r = 0; r < RW; r++) pc[r].issue(wrow[r], p);
            float xv[32], xs0, xs1;
            gemv_x_piece<T>(xr, p, xvec, xv, xs0, xs1);
#pragma unroll
            for (int r = 0; r < RW; r++) {
                float v[32], sc[2], off[2];
                gemv_parts<T>(pc[r], p, v, sc, off);
                float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    d0 = fmaf(xv[gemv_elem<T>(j)], v[j], d0);
                    d1 = fmaf(xv[gemv_elem<T>(16 + j)], v[16 + j], d1);
                }
                acc[r] += sc[0] * d0 + off[0] * xs0 + sc[1] * d1 + off[1] * xs1;
            }
        }
        gemv_store<RW>(a, paired, acc, lane, nb, yrow);
    }
}

// f32 SIMT GEMM (gemm_f32_simt, gemm_f32_simt_m32): x and W in f32, FFMA on the CUDA cores, f32
// accumulation, so the result is exact to f32 rounding (~2e-7 relative Frobenius against f64 at
// K = 2048). 256 threads; each thread owns a 4 x 4 register tile of outputs, rows tm + (BM/4) i,
// columns tn + (BN/4) j (i, j < 4). A warp covers 4 x 8 thread positions, so per k-group of 4 its
// float4 shared-memory reads touch 4 (x) and 8 (W) consecutive smem rows: one wavefront each at
// the row stride LDS = BK + 4 floats (20 or 36: 8 consecutive rows start in distinct bank
// groups). KS > 1 splits each BK step's k among KS slices of 256/KS threads (the same 4 x 4
// thread tiles over a smaller block tile), whose partial tiles are summed through shared memory
// at the end in slice order: 4x the blocks for small M, the same work per output.
// Pipeline: x and W tiles [BM + BN][BK] (row-major, k contiguous) go global -> shared by cp.async
// (16 bytes when the operand is 16-byte aligned with a 16-byte row stride and K % 4 == 0, with
// chunks past K stored as zeros; else 4 bytes, zero-filled past K) into a SIMT_STAGES-deep ring,
// two steps in flight; one __syncthreads per step. Rows past M / N are clamped to the last valid
// row on load and not stored.
// Accumulation order (fixed, no atomics): per output and slice, k ascending with fmaf into a
// partial that is added to the accumulator every 64 of the slice's k (shorter rounding chains:
// 2e-7 instead of 8e-7 for one chain of 2048); then slices 0 + 1 + ... + KS-1.
// TC (gemm_f32_tf32 and gemm_f32_tf32_m32: the same tiles, slices, ring and loads as
// gemm_f32_simt and gemm_f32_simt_m32): the products on the tensor cores in three tf32 passes
// (3xTF32): each x and W value is split into tf32 hi + lo as its fragment is read from shared
// memory, and each k8 step adds lo_x hi_w, hi_x lo_w, then hi_x hi_w (mma.sync m16n8k8; the
// lo x lo term, ~2^-22 relative, is dropped) into the same 64-k partials, slices summed as
// above. A slice's warps tile its block in warp tiles of 32 x 16, TMT = 2 m16 by TNT = 2 n8
// fragments (acc[TNT mt + nt][c] in the C layout: 16 floats, as the SIMT thread's): 64 x 64 over
// 8 warps as 2 (rows) x 4 (columns); 32 x 32 over a slice's 2 warps as 1 x 2. Fragment reads hit
// distinct banks at LDS = BK + 4 = 20 or 36 floats (row g, column t: 20 g + t or 4 g + t mod 32).
template <int BM, int BN, int KS, int BK, bool TC = false>
__device__ __forceinline__ void simt_body(const GemmArgs& a) {
    constexpr int S = SIMT_STAGES, LDS = BK + 4, T = SIMT_THREADS;
    constexpr int TS = T / KS;                 // threads per K slice
    constexpr int TPM = BM / 4, TPN = BN / 4;  // thread positions along M and N
    constexpr int KPS = BK / KS;               // k of one step per slice
    constexpr int ROWS = BM + BN;              // smem rows per stage: x rows, then W rows
    constexpr int CH = ROWS * BK / 4;          // 16-byte chunks per stage
    constexpr int CPT = CH / T;                // chunks per thread per stage
    constexpr int FLUSH = 64 / KPS;            // steps between partial flushes
    static_assert(TPM * TPN == TS && TS % 32 == 0, "4 x 4 outputs per thread");
    static_assert(TPN % 8 == 0 && TPM % 4 == 0, "a warp is 4 x 8 thread positions");
    static_assert(KPS % 4 == 0 && CH % T == 0 && FLUSH >= 1, "tiling");
    static_assert(KS == 1 || (KS - 1) * BM * BN <= S * ROWS * LDS, "slice partials fit the ring");
    constexpr int TMT = 2, TNT = 2;       // TC: m16 and n8 fragments a warp (a 32 x 16 warp tile)
    constexpr int TWM = BM / (16 * TMT);  // TC: warp tiles along M
    static_assert(!TC || (TWM * (BN / (8 * TNT)) == TS / 32 && BM % (16 * TMT) == 0 && BN % (8 * TNT) == 0 &&
                          KPS % 8 == 0),
                  "tf32 warp tiling");
    __shared__ __align__(16) float sm[S * ROWS * LDS];

    if (!gemm_args_ok(a, 1) || a.tile_expert || a.sorted_rows) return;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    if (n0 >= a.N || m0 >= a.M) return;
    const int tid = threadIdx.x, lane = tid & 31;
    const int slice = tid / TS, wis = (tid % TS) >> 5;  // K slice, warp within the slice
    const int tn = (lane & 7) + 8 * (wis % (TPN / 8));
    const int tm = (lane >> 3) + 4 * (wis / (TPN / 8));
    const int K = a.K;

    // Loader: chunk c = tid + T i is smem row c / (BK/4), floats 4 (c % (BK/4)) .. +3 of the step.
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0 && (K & 3) == 0;
    const bool wvec = (reinterpret_cast<u64>(a.w) & 15u) == 0 && (a.w_row_bytes & 15) == 0 && (K & 3) == 0;
    const float* rowp[CPT];
    int soff[CPT], kq[CPT];
    bool vec[CPT];
#pragma unroll
    for (int i = 0; i < CPT; i++) {
        const int c = tid + T * i, r = c / (BK / 4);
        kq[i] = 4 * (c % (BK / 4));
        soff[i] = r * LDS + kq[i];
        if (r < BM) {
            rowp[i] = a.x + static_cast<i64>(min(m0 + r, a.M - 1)) * a.ldx;
            vec[i] = xvec;
        } else {
            rowp[i] = reinterpret_cast<const float*>(a.w + static_cast<i64>(min(n0 + r - BM, a.N - 1)) * a.w_row_bytes);
            vec[i] = wvec;
        }
    }
    auto issue = [&](int kt) {
        float* st = sm + (kt % S) * (ROWS * LDS);
#pragma unroll
        for (int i = 0; i < CPT; i++) {
            const int k = kt * BK + kq[i];
            float* d = st + soff[i];
            if (vec[i]) {
                if (k < K) cp_async16(d, rowp[i] + k);
                else *reinterpret_cast<float4*>(d) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const bool in = k + j < K;
                    cp_async4(d + j, in ? rowp[i] + k + j : rowp[i], in ? 4u : 0u);
                }
            }
        }
    };

    float acc[4][4], part[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = part[i][j] = 0.0f;
    // TC: this warp's tile in its slice (rows wm.., columns wn..) and the lane's fragment
    // position; a function of tid % TS only, so the slices' partial tiles line up.
    const int wsl = (tid % TS) >> 5, fg = lane >> 2, ft = lane & 3;
    const int wm = (wsl % TWM) * 16 * TMT, wn = (wsl / TWM) * 8 * TNT;
    auto compute = [&](int kt) {
        if constexpr (TC) {
            const float* st = sm + (kt % S) * (ROWS * LDS) + (tid / TS) * KPS;
#pragma unroll
            for (int kk = 0; kk < KPS; kk += 8) {
                u32 ah[TMT][4], al[TMT][4], bh[TNT][2], bl[TNT][2];
#pragma unroll
                for (int mt = 0; mt < TMT; mt++) {
                    const float* p = st + (wm + 16 * mt + fg) * LDS + kk + ft;
                    tf32_split(p[0], ah[mt][0], al[mt][0]);
                    tf32_split(p[8 * LDS], ah[mt][1], al[mt][1]);
                    tf32_split(p[4], ah[mt][2], al[mt][2]);
                    tf32_split(p[8 * LDS + 4], ah[mt][3], al[mt][3]);
                }
#pragma unroll
                for (int nt = 0; nt < TNT; nt++) {
                    const float* q = st + (BM + wn + 8 * nt + fg) * LDS + kk + ft;
                    tf32_split(q[0], bh[nt][0], bl[nt][0]);
                    tf32_split(q[4], bh[nt][1], bl[nt][1]);
                }
#pragma unroll
                for (int mt = 0; mt < TMT; mt++)
#pragma unroll
                    for (int nt = 0; nt < TNT; nt++) {
                        float* c = part[TNT * mt + nt];
                        mma_1688_tf32(c, al[mt], bh[nt][0], bh[nt][1]);
                        mma_1688_tf32(c, ah[mt], bl[nt][0], bl[nt][1]);
                        mma_1688_tf32(c, ah[mt], bh[nt][0], bh[nt][1]);
                    }
            }
        } else {
            const float* st = sm + (kt % S) * (ROWS * LDS) + slice * KPS;
            const float* As = st + tm * LDS;
            const float* Bs = st + (BM + tn) * LDS;
#pragma unroll
            for (int k4 = 0; k4 < KPS; k4 += 4) {
                float4 av[4], bv[4];
#pragma unroll
                for (int i = 0; i < 4; i++) av[i] = *reinterpret_cast<const float4*>(As + i * TPM * LDS + k4);
#pragma unroll
                for (int j = 0; j < 4; j++) bv[j] = *reinterpret_cast<const float4*>(Bs + j * TPN * LDS + k4);
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float p = part[i][j];
                        p = fmaf(av[i].x, bv[j].x, p);
                        p = fmaf(av[i].y, bv[j].y, p);
                        p = fmaf(av[i].z, bv[j].z, p);
                        part[i][j] = fmaf(av[i].w, bv[j].w, p);
                    }
            }
        }
    };
    auto flush = [&]() {
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[i][j] += part[i][j];
                part[i][j] = 0.0f;
            }
    };

    // Ring: step kt lives in slot kt % S. One commit per step (empty past the end) keeps the
    // group count uniform: waiting until S-2 groups are pending means step kt has landed for
    // this thread; the barrier then makes every thread's copies visible and frees slot
    // (kt - 1) % S, which step kt + S - 1 overwrites.
    const int KT = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < KT) issue(s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<S - 2>();
        __syncthreads();
        if (kt + S - 1 < KT) issue(kt + S - 1);
        cp_async_commit();
        compute(kt);
        if (kt % FLUSH == FLUSH - 1) flush();
    }
    flush();
    cp_async_wait<0>();

    if constexpr (KS > 1) {
        // Slices 1.. park their tiles in the (now idle) ring; slice 0 adds them in order.
        const int t = tid % TS;
        __syncthreads();
        if (slice > 0) {
#pragma unroll
            for (int e = 0; e < 16; e++) sm[((slice - 1) * 16 + e) * TS + t] = acc[e >> 2][e & 3];
        }
        __syncthreads();
        if (slice > 0) return;
#pragma unroll
        for (int s = 1; s < KS; s++)
#pragma unroll
            for (int e = 0; e < 16; e++) acc[e >> 2][e & 3] += sm[((s - 1) * 16 + e) * TS + t];
    }

    const bool split = a.layout == 1;
    if constexpr (TC) {
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const int mt = f / TNT, nt = f % TNT;
#pragma unroll
            for (int h = 0; h < 2; h++) {  // C rows g, g + 8
                const int m = m0 + wm + 16 * mt + fg + 8 * h;
                if (m >= a.M) continue;
                float* yrow = a.y + static_cast<i64>(m) * a.ldy;
#pragma unroll
                for (int e = 0; e < 2; e++) {  // C columns 2t, 2t + 1
                    const int n = n0 + wn + 8 * nt + 2 * ft + e;
                    if (n < a.N) yrow[gemm_out_col(n, split, a.head_dim, a.n_head)] = acc[f][2 * h + e];
                }
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int m = m0 + tm + TPM * i;
            if (m >= a.M) continue;
            float* yrow = a.y + static_cast<i64>(m) * a.ldy;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int n = n0 + tn + TPN * j;
                if (n < a.N) yrow[gemm_out_col(n, split, a.head_dim, a.n_head)] = acc[i][j];
            }
        }
    }
}

// Blocks per SM the BM = 32 kernels are compiled for: 3 (<= 80 registers) where that fits
// without spilling; the Q6_K decode needs more registers.
// Blocks per multiprocessor that the decode kernels' launch bounds ask for (register budget
// 65536 / (256 x blocks)): 2 by default; TALLY_GEMV_BLOCKS (options.rs) overrides each family,
// an experiment switch (at 3, the 80-register budget makes several types' kernels spill).
#ifndef GEMV_MIN_BLOCKS
#define GEMV_MIN_BLOCKS 2
#endif
#ifndef GEMV4_MIN_BLOCKS
#define GEMV4_MIN_BLOCKS 2
#endif
#ifndef GEMV_MULTI_MIN_BLOCKS
#define GEMV_MULTI_MIN_BLOCKS 2
#endif
#ifndef MMV_MIN_BLOCKS
#define MMV_MIN_BLOCKS 2
#endif
#define GEMM_M32_MIN_BLOCKS(T) ((T) == QT_Q6_K || (T) == QT_Q3_K ? 2 : 3)
// Blocks per multiprocessor of gemvi_<t> / gemvi_multi_<t> (the integer body alone, 2 rows a
// warp): without gemv_<t>'s f32 body and gemv_multi's multi-row body beside it (95-117
// registers, 2 blocks), ptxas fits the integer body in 64 registers with no spills for Q4_K,
// the 32-element and codebook formats and Q2_K (4 blocks: 32 warps a multiprocessor), Q5_K and
// Q8_0 in 80 (3); Q6_K and Q3_K spill below 128 (2, as gemv_<t>). Measured with nvcc -Xptxas -v
// at sm_90a (2026-12-07).
#define GEMVI_MIN_BLOCKS(T)                                                                      \
    ((T) == QT_Q6_K || (T) == QT_Q3_K || (T) == QT_F32 || (T) == QT_F16 || (T) == QT_BF16 ? 2  \
     : (T) == QT_Q5_K || (T) == QT_Q8_0                                                 ? 3  \
                                                                                         : 4)

// Blocks per multiprocessor of gemvi_mr_<t> (gemv_int_mr_body alone: 4 x rows, 2 weight rows a
// warp, 8 accumulators a lane): at most 80 registers for 3 blocks; the formats whose integer body
// already needs more at one x row (GEMVI_MIN_BLOCKS 2) stay at 2.
#ifndef GEMVI_MR_MIN_BLOCKS
#define GEMVI_MR_MIN_BLOCKS(T) (GEMVI_MIN_BLOCKS(T) == 2 ? 2 : 3)
#endif

// The lab's variants of the wgmma tiles (nvcc builds), not compiled into the engine: w64, x32g.
#ifdef TALLY_NVRTC
#define TALLY_WG_LAB_KERNELS(name, T)
#else
#define TALLY_WG_LAB_KERNELS(name, T)                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_w64(GemmArgs a) { pdl_enter(); \
        gemm_wg_body<T, 64>(a);                                                                      \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_x32g(GemmArgs a) { pdl_enter(); \
        gemm_wgx_body<T, 32, 2048>(a);                                                               \
    }
// The lab's timing ablations of gemm_q4_k_g32 (gemm_wg_body's ABL mask; wrong results by design).
#define TALLY_G32_ABL(m)                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) gemm_q4_k_g32_abl##m(GemmArgs a) { \
        pdl_enter();                                                                                  \
        gemm_wg_body<QT_Q4_K, 32, false, true, m>(a);                                                \
    }
#endif

#define TALLY_GEMM_KERNELS(name, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name(GemmArgs a) { pdl_enter();          \
        gemm_body<T, 128>(a);                                                                        \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) gemm_##name##_m64(GemmArgs a) { pdl_enter();    \
        gemm_body<T, 64>(a);                                                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_M32_MIN_BLOCKS(T)) gemm_##name##_m32(GemmArgs a) { pdl_enter(); \
        gemm_body<T, 32>(a);                                                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, SWP_MIN_BLOCKS) gemm_##name##_s16(GemmArgs a) { pdl_enter(); \
        gemm_swap_body<T, 2>(a);                                                                     \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) gemm_##name##_s32(GemmArgs a) { pdl_enter(); \
        gemm_swap_body<T, 4>(a);                                                                     \
    }                                                                                                \
    TALLY_WG_LAB_KERNELS(name, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_w128(GemmArgs a) { pdl_enter(); \
        gemm_wg_body<T, 128, true>(a);                                                               \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) gemm_##name##_w32(GemmArgs a) { pdl_enter(); \
        gemm_wg_body<T, 32>(a);                                                                      \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) gemm_##name##_g32(GemmArgs a) { pdl_enter(); \
        gemm_wg_body<T, 32, false, true>(a);                                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_g128(GemmArgs a) { pdl_enter(); \
        gemm_wg_body<T, 128, true, true>(a);                                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) gemm_##name##_gs128(GemmArgs a) { pdl_enter(); \
        gemm_ws_body<T>(a);                                                                          \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) gemm_##name##_gs256(GemmArgs a) { pdl_enter(); \
        /* only where the stages fit a block (32-byte slots); else no code, nothing written */       \
        if constexpr (WS256_SMEM_BYTES(T) <= 232448) gemm_ws_body<T, 256>(a);                        \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) gemm_##name##_gs256a(GemmArgs a) { pdl_enter(); \
        /* gs256 with two A stages (TALLY_WS256=a2); code only where they fit a block */             \
        if constexpr (WS256A_SMEM_BYTES(T) <= 232448) gemm_ws_body<T, 256, true>(a);                 \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_x64(GemmArgs a) { pdl_enter(); \
        gemm_wgx_body<T, 64>(a);                                                                     \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_x96(GemmArgs a) { pdl_enter(); \
        gemm_wgx_body<T, 96>(a);                                                                     \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_##name##_x128(GemmArgs a) { pdl_enter(); \
        gemm_wgx_body<T, 128>(a);                                                                    \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) gemm_##name##_xs128(GemmArgs a) { pdl_enter(); \
        gemm_wsx_body<T>(a);                                                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, WGX32_MIN_BLOCKS(T)) gemm_##name##_x32(GemmArgs a) { \
        pdl_enter();                                                                                 \
        gemm_wgx_body<T, 32, WGX_K_MAX, WGX32_STAGES(T)>(a);                                         \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_MIN_BLOCKS) gemv_##name(GemmArgs a) {                \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 2));                                      \
        gemv_body<T>(a);                                                                             \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV4_MIN_BLOCKS) gemv4_##name(GemmArgs a) {               \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 4));                                      \
        gemv_body<T, 4>(a);                                                                          \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV4_MIN_BLOCKS) gemvr_##name(GemmArgs a) {               \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 4));                                      \
        gemvr_body<T, 1, 4>(a);                                                                      \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 1) gemvt_##name(GemmArgs a) {                              \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 4));                                      \
        gemvt_body<T, 1, 4, GEMVT_STAGES>(a);                                                        \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) gemvt2_##name(GemmArgs a) {                             \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 2));                                      \
        gemvt_body<T, 1, 2, GEMVT_STAGES>(a);                                                        \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) gemvt4_##name(GemmArgs a) {                             \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 2));                                      \
        gemvt_body<T, 4, 2, GEMVT_STAGES>(a);                                                        \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV4_MIN_BLOCKS) gemvr4_##name(GemmArgs a) {              \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 2));                                      \
        gemvr_body<T, 4, 2>(a);                                                                      \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_MULTI_MIN_BLOCKS) gemv_multi_##name(MultiGemvArgs m) {     \
        pdl_enter_prefetch(gemv_multi_range(m));                                                     \
        gemv_multi_body<T>(m);                                                                       \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMVI_MIN_BLOCKS(T)) gemvi_##name(GemmArgs a) {            \
        pdl_enter_prefetch(gemv_dense_range(a, blockIdx.x, 2));                                      \
        gemvi_body<T>(a, static_cast<int>(blockIdx.x));                                              \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMVI_MIN_BLOCKS(T)) gemvi_multi_##name(MultiGemvArgs m) { \
        pdl_enter_prefetch(gemv_multi_range(m));                                                     \
        gemvi_multi_body<T>(m);                                                                      \
    } \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMVI_MR_MIN_BLOCKS(T)) gemvi_mr_##name(MultiGemvArgs m) { \
        pdl_enter_prefetch(gemv_multi_range(m));                                                     \
        gemvi_mr_body<T>(m);                                                                         \
    }

// gemvi_<t>: gemv_<t> (2 rows a warp, or paired) where it takes its integer body (an integer
// format, K <= GEMV_QK_MAX; the host launches it only there), that body alone, so that its
// launch bound can ask for GEMVI_MIN_BLOCKS(T) blocks a multiprocessor: the same bits as
// gemv_<t> and gemv4_<t> (gemv_int_body's sums do not depend on RW). Anything else (a float
// type: gemv_<t>'s body; K > GEMV_QK_MAX: nothing written) is not what the host launches.
template <int T>
__device__ __forceinline__ void gemvi_body(const GemmArgs& a, const int bx) {
    if constexpr (qt_has_bytes(T)) {
        if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
        if (a.w2 != nullptr && (a.layout != 0 || !a.y2)) return;
        if (a.K > GEMV_QK_MAX) return;
        gemv_int_body<T, 2>(a, bx);
    } else {
        gemv_body<T, 2>(a, bx);
    }
}
// gemvi_multi_<t>: gemv_multi_<t> of one x row a block (mr 0) with every segment at 2 rows a
// warp, on gemvi_body (segments at another rw, or mr > 1: nothing written).
template <int T>
__device__ __forceinline__ void gemvi_multi_body(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (m.mr > 1 || !multi_segment(m, s, bx, gx)) return;
#pragma unroll
    for (int j = 0; j < GEMV_MULTI_SEGS; j++) {
        if (s == j) {
            if (m.rw[j] == 2) gemvi_body<T>(m.seg[j], bx);
            return;
        }
    }
}

// gemvi_mr_<t>: gemv_multi_<t>'s every-row form (mr > 1: a verification batch's in-projections,
// each block taking all M x rows, gemv_int_mr_body) alone, so that its launch bound can ask for
// GEMVI_MR_MIN_BLOCKS(T) blocks a multiprocessor where gemv_multi_<t>, with its f32 bodies
// beside it, runs 2. The same body, so the same bits (mr 0 or a segment at another rw: nothing
// written).
template <int T>
__device__ __forceinline__ void gemvi_mr_body(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (m.mr < 2 || blockIdx.y != 0 || !multi_segment(m, s, bx, gx)) return;
#pragma unroll
    for (int j = 0; j < GEMV_MULTI_SEGS; j++) {
        if (s == j) {
            if (m.rw[j] == 2) gemv_int_mr_body<T, 2, GEMVR_MAX_M>(m.seg[j], bx, m.mr);
            return;
        }
    }
}

// One inlined body per segment (constant indices: the arguments stay in the parameter bank).
template <int T>
__device__ __forceinline__ void gemv_multi_body(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (!multi_segment(m, s, bx, gx)) return;
#pragma unroll
    for (int j = 0; j < GEMV_MULTI_SEGS; j++) {
        if (s == j) {
            if (m.mr > 1) {  // every x row in this block: 2 rows a warp, one grid row
                if (m.rw[j] == 2 && blockIdx.y == 0) gemv_int_mr_body<T, 2, GEMVR_MAX_M>(m.seg[j], bx, m.mr);
            } else if (m.rw[j] == 4) gemv_body<T, 4>(m.seg[j], bx);
            else gemv_body<T, 2>(m.seg[j], bx);
            return;
        }
    }
}

// The prefetch of gemv_multi's block: its segment's rows, as gemv_dense_range.
__device__ __forceinline__ L2Ranges gemv_multi_range(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (multi_segment(m, s, bx, gx)) {
#pragma unroll
        for (int j = 0; j < GEMV_MULTI_SEGS; j++)
            if (s == j) return gemv_dense_range(m.seg[j], bx, m.rw[j]);
    }
    return L2Ranges{{nullptr, nullptr}, {0, 0}};
}

TALLY_GEMM_KERNELS(q4_k, QT_Q4_K)
TALLY_GEMM_KERNELS(q5_k, QT_Q5_K)
TALLY_GEMM_KERNELS(q6_k, QT_Q6_K)
TALLY_GEMM_KERNELS(q8_0, QT_Q8_0)
TALLY_GEMM_KERNELS(bf16, QT_BF16)
TALLY_GEMM_KERNELS(f16, QT_F16)
TALLY_GEMM_KERNELS(f32, QT_F32)
TALLY_GEMM_KERNELS(q4_0, QT_Q4_0)
TALLY_GEMM_KERNELS(q4_1, QT_Q4_1)
TALLY_GEMM_KERNELS(q5_0, QT_Q5_0)
TALLY_GEMM_KERNELS(q5_1, QT_Q5_1)
TALLY_GEMM_KERNELS(iq4_nl, QT_IQ4_NL)
TALLY_GEMM_KERNELS(iq4_xs, QT_IQ4_XS)
TALLY_GEMM_KERNELS(mxfp4, QT_MXFP4)
TALLY_GEMM_KERNELS(q2_k, QT_Q2_K)
TALLY_GEMM_KERNELS(q3_k, QT_Q3_K)
#if !defined(TALLY_NVRTC) && !defined(TALLY_EMU)
TALLY_G32_ABL(1)
TALLY_G32_ABL(2)
TALLY_G32_ABL(3)
TALLY_G32_ABL(4)
TALLY_G32_ABL(16)
TALLY_G32_ABL(20)
TALLY_G32_ABL(23)
TALLY_G32_ABL(32)
TALLY_G32_ABL(52)
#endif

// ---------------------------------------------------------------------------------------------
// mmv_<t>: the decode GEMV (few x rows, e.g. one token, or the (token, expert) pairs of one MoE
// tile). Same weight front end as everything else (Piece<T>::issue / to_parts), laid out for
// bandwidth: a thread owns ONE piece index p (32 elements of K) of every row it touches, so its
// 32 x values and their two segment sums are loaded into registers once per x row and reused
// for every weight row the block visits, instead of re-read per row as gemv_<t> does (for
// K = 2048 gemv_<t> moves 3.5x more x bytes through L1 than weight bytes).
//
// Geometry: MMV_THREADS threads = groups of tpr = mmv_tpr(K) threads (K/32 rounded up to a power
// of two); each group owns one row at a time, each thread MMV_UNROLL(T) rows per step (their
// loads in flight together), so a step covers mmv_rows_per_step(T, K) rows. The block walks row
// steps blockIdx.x, blockIdx.x + gridDim.x, ... (grid-stride), so the host picks gridDim.x =
// min(steps, a few waves) and x is loaded once per block. grid.y: dense, the x row (M rows); MoE,
// the tile (as for gemv_<t>). Partial sums: xor-shuffles inside a group of <= 32, through shared
// memory across the warps of a larger group (all loops are block-uniform around the barriers).
// Preconditions (else nothing is written): as gemv_<t>, and K / 32 <= MMV_THREADS (K <= 8192).
// Precision: the same f32 operations as gemv_<t> in a different summation order (~1e-6).
#define MMV_UNROLL(t) ((t) == QT_Q6_K || (t) == QT_F32 || (t) == QT_F16 || (t) == QT_BF16 || (t) == QT_Q3_K ? 2 : 4)
__host__ __device__ constexpr int mmv_tpr(int K) {
    int t = 1;
    while (t < K / 32) t <<= 1;
    return t;
}
__host__ __device__ constexpr int mmv_rows_per_step(int type, int K) {
    return (MMV_THREADS / (mmv_tpr(K) < MMV_THREADS ? mmv_tpr(K) : MMV_THREADS)) * MMV_UNROLL(type);
}

// bx, gx: the block's index among the launch's (or its segment's) grid.x blocks, and their
// number (the grid-stride loop's start and stride).
//
// INT (mmvi_<t>, integer formats, K <= GEMV_QK_MAX): each x row quantised once per block into
// shared memory as gemv_int_body does (gemv_quantize_x), each thread's piece of it kept in
// registers, and each (piece, row) product gemv_int_body's (gemv_piece_dot, added to 0.0f): for
// tpr <= 32 (K <= 1,024, every use of mmv: use_mmv) the group's xor tree over its tpr lanes is
// the tree warp_sum applies to gemv_int_body's lanes (the lanes past P hold 0.0f), so every
// output is gemv_<t>'s bit for bit. About a third of the f32 body's instructions per weight byte.
template <int T, bool INT = false>
__device__ __forceinline__ void mmv_body(const GemmArgs& a, const int bx, const int gx) {
    constexpr int U = MMV_UNROLL(T);
    constexpr int NW = MMV_THREADS / 32;
    if (!gemm_args_ok(a, qt_block_elems(T) > 32 ? qt_block_elems(T) : 32)) return;
    const int P = a.K / 32;
    if (P > MMV_THREADS) return;
    if (INT && a.K > GEMV_QK_MAX) return;
    const int tpr = mmv_tpr(a.K);
    const int groups = MMV_THREADS / tpr;
    const int g = threadIdx.x / tpr, p = threadIdx.x % tpr;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool active = p < P;
    const int rows_per_step = groups * U;
    const int steps = (a.N + rows_per_step - 1) / rows_per_step;
    const u8* w;
    int start, rows;
    if (!gemm_block_rows(a, a.tile_expert ? 0x7fffffff : 1, w, start, rows)) return;  // block-uniform
    const bool xvec = (reinterpret_cast<u64>(a.x) & 15u) == 0 && (a.ldx & 3) == 0;
    const bool split = a.layout == 1;
    const int pp = active ? p : 0;  // idle threads read piece 0 and add nothing
    __shared__ float red[NW][U];

    for (int i = 0; i < rows; i++) {
        int xrow, yrow;
        if (!gemm_row(a, start, i, xrow, yrow)) continue;  // block-uniform
        const float* xr = a.x + static_cast<i64>(xrow) * a.ldx;
        float xv[INT ? 1 : 32], xs0 = 0.0f, xs1 = 0.0f;
        u32 xw[INT ? 16 : 1];
        uint4 xm = make_uint4(0u, 0u, 0u, 0u);
        if constexpr (INT) {
            GemvX& sx = gemv_x_smem();
            __syncthreads();  // the previous row's readers are done with sx
            gemv_quantize_x<T>(xr, a.K, xvec, sx.q, sx.m);
            __syncthreads();
            gemv_x_piece(sx.q, pp, xw);
            xm = sx.m[pp];
        } else {
            gemv_x_piece<T>(xr, pp, xvec, xv, xs0, xs1);
        }
        for (int step = bx; step < steps; step += gx) {
            const int n0 = step * rows_per_step + g;  // this thread's rows: n0 + groups * u
            Piece<T> pc[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int n = min(n0 + groups * u, a.N - 1);
                pc[u].issue(w + static_cast<i64>(n) * a.w_row_bytes, pp);
            }
            float acc[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                if constexpr (INT) {
                    u32 b[8];
                    float sc[2], off[2];
                    gemv_bytes<T>(pc[u], pp, b, sc, off);
                    acc[u] = active ? 0.0f + gemv_piece_dot<gemv_zo<T>()>(xw, xm, b, sc, off) : 0.0f;
                } else {
                    float v[32], sc[2], off[2];
                    gemv_parts<T>(pc[u], pp, v, sc, off);
                    float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
                    for (int j = 0; j < 16; j++) {
                        d0 = fmaf(xv[gemv_elem<T>(j)], v[j], d0);
                        d1 = fmaf(xv[gemv_elem<T>(16 + j)], v[16 + j], d1);
                    }
                    acc[u] = active ? sc[0] * d0 + off[0] * xs0 + sc[1] * d1 + off[1] * xs1 : 0.0f;
                }
            }
            if (tpr <= 32) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    for (int o = tpr >> 1; o > 0; o >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
                if (p == 0) {
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int n = n0 + groups * u;
                        if (n < a.N) a.y[static_cast<i64>(yrow) * a.ldy + gemm_out_col(n, split, a.head_dim, a.n_head)] = acc[u];
                    }
                }
            } else {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const float s = warp_sum(acc[u]);
                    if (lane == 0) red[warp][u] = s;
                }
                __syncthreads();
                if (p == 0) {
                    const int wpg = tpr / 32;  // warps per group
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        float s = 0.0f;
                        for (int j = 0; j < wpg; j++) s += red[g * wpg + j][u];
                        const int n = n0 + groups * u;
                        if (n < a.N) a.y[static_cast<i64>(yrow) * a.ldy + gemm_out_col(n, split, a.head_dim, a.n_head)] = s;
                    }
                }
                __syncthreads();
            }
        }
    }
}

// The weight rows of a dense mmv block's first two row steps (bx and bx + gx; the host sizes
// the grid so most blocks have one or two), from the parameters.
template <int T>
__device__ __forceinline__ L2Ranges mmv_dense_range(const GemmArgs& a, const int bx, const int gx) {
    L2Ranges r = {{nullptr, nullptr}, {0, 0}};
    if (a.tile_expert != nullptr || a.sorted_rows != nullptr || blockIdx.y != 0 || a.K / 32 > MMV_THREADS) return r;
    const int rps = mmv_rows_per_step(T, a.K);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const i64 n0 = static_cast<i64>(bx + j * gx) * rps;
        const i64 n1 = min(n0 + rps, static_cast<i64>(a.N));
        if (n0 >= n1) break;
        r.p[j] = a.w + n0 * a.w_row_bytes;
        r.bytes[j] = (n1 - n0) * a.w_row_bytes;
    }
    return r;
}

// mmv_multi_<t>: up to GEMV_MULTI_SEGS mmv_<t> launches in one (MultiGemvArgs; rw unused):
// segment s owns blocks [block_end[s-1], block_end[s]) of grid.x, each running mmv_<t>'s body
// on its own arguments with its index and count inside the segment, so every output is the bits
// mmv_<t> alone writes. grid.y is the largest segment's (rows or MoE tiles); a segment's blocks
// past its own rows or tiles exit. E.g. the routed experts' down projection beside the shared
// expert's at decode.
template <int T>
__device__ __forceinline__ L2Ranges mmv_multi_range(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (multi_segment(m, s, bx, gx)) {
#pragma unroll
        for (int j = 0; j < GEMV_MULTI_SEGS; j++)
            if (s == j) return mmv_dense_range<T>(m.seg[j], bx, gx);
    }
    return L2Ranges{{nullptr, nullptr}, {0, 0}};
}
template <int T, bool INT = false>
__device__ __forceinline__ void mmv_multi_body(const MultiGemvArgs& m) {
    int s, bx, gx;
    if (!multi_segment(m, s, bx, gx)) return;
#pragma unroll
    for (int j = 0; j < GEMV_MULTI_SEGS; j++) {
        if (s == j) {
            mmv_body<T, INT>(m.seg[j], bx, gx);
            return;
        }
    }
}

// Blocks per multiprocessor of mmvi_<t> / mmvi_multi_<t> (mmv's integer body): the most that
// ptxas fits without spilling (nvcc -Xptxas -v at sm_90a, 2026-12-07): 4 for Q6_K (2 pieces in
// flight, 64 registers), 3 for Q4_K, Q8_0, IQ4_XS, Q4_1 and Q2_K (75-80 registers), 2 for the
// others (MXFP4, Q5_K, Q3_K, Q4_0, Q5_0, Q5_1, IQ4_NL spill at 3). The float types have no
// integer body (mmv's, at 2).
#define MMVI_MIN_BLOCKS(T)                                                                                 \
    ((T) == QT_Q6_K ? 4                                                                                    \
     : (T) == QT_MXFP4 || (T) == QT_Q5_K || (T) == QT_Q3_K || (T) == QT_Q4_0 || (T) == QT_Q5_0            \
             || (T) == QT_Q5_1 || (T) == QT_IQ4_NL || (T) == QT_F32 || (T) == QT_F16 || (T) == QT_BF16       \
         ? 2                                                                                               \
         : 3)
#define TALLY_MMV_KERNEL(name, T)                                                               \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_MIN_BLOCKS) mmv_##name(GemmArgs a) {       \
        pdl_enter_prefetch(mmv_dense_range<T>(a, blockIdx.x, gridDim.x));                       \
        mmv_body<T>(a, blockIdx.x, gridDim.x);                                                  \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_MIN_BLOCKS) mmv_multi_##name(MultiGemvArgs m) { \
        pdl_enter_prefetch(mmv_multi_range<T>(m));                                              \
        mmv_multi_body<T>(m);                                                                   \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMVI_MIN_BLOCKS(T)) mmvi_##name(GemmArgs a) {  \
        pdl_enter_prefetch(mmv_dense_range<T>(a, blockIdx.x, gridDim.x));                       \
        mmv_body<T, qt_has_bytes(T)>(a, blockIdx.x, gridDim.x);                                 \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMVI_MIN_BLOCKS(T)) mmvi_multi_##name(MultiGemvArgs m) { \
        pdl_enter_prefetch(mmv_multi_range<T>(m));                                              \
        mmv_multi_body<T, qt_has_bytes(T)>(m);                                                  \
    }
TALLY_MMV_KERNEL(q4_k, QT_Q4_K)
TALLY_MMV_KERNEL(q5_k, QT_Q5_K)
TALLY_MMV_KERNEL(q6_k, QT_Q6_K)
TALLY_MMV_KERNEL(q8_0, QT_Q8_0)
TALLY_MMV_KERNEL(bf16, QT_BF16)
TALLY_MMV_KERNEL(f16, QT_F16)
TALLY_MMV_KERNEL(f32, QT_F32)
TALLY_MMV_KERNEL(q4_0, QT_Q4_0)
TALLY_MMV_KERNEL(q4_1, QT_Q4_1)
TALLY_MMV_KERNEL(q5_0, QT_Q5_0)
TALLY_MMV_KERNEL(q5_1, QT_Q5_1)
TALLY_MMV_KERNEL(iq4_nl, QT_IQ4_NL)
TALLY_MMV_KERNEL(iq4_xs, QT_IQ4_XS)
TALLY_MMV_KERNEL(mxfp4, QT_MXFP4)
TALLY_MMV_KERNEL(q2_k, QT_Q2_K)
TALLY_MMV_KERNEL(q3_k, QT_Q3_K)

extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) gemm_f32_simt(GemmArgs a) {
    pdl_enter();
    simt_body<SIMT_BM, SIMT_BN, 1, SIMT_BK>(a);
}
extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) gemm_f32_simt_m32(GemmArgs a) {
    pdl_enter();
    simt_body<SIMT_M32_BM, SIMT_M32_BN, SIMT_M32_KS, SIMT_M32_BK>(a);
}
extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) gemm_f32_tf32(GemmArgs a) {
    pdl_enter();
    simt_body<SIMT_BM, SIMT_BN, 1, SIMT_BK, true>(a);
}
extern "C" __global__ void __launch_bounds__(SIMT_THREADS, 2) gemm_f32_tf32_m32(GemmArgs a) {
    pdl_enter();
    simt_body<SIMT_M32_BM, SIMT_M32_BN, SIMT_M32_KS, SIMT_M32_BK, true>(a);
}

#include "gemm_operands.cuh"
