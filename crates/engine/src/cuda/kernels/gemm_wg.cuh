#pragma once
// gemm_<t>_w<BT> (BT = 32, 64, 128): the swapped tile (gemm_swap_body) on Hopper's warpgroup MMA
// (wgmma, sm_90a), for MoE tiles of any height and dense projections of many rows.
//
// As in the swapped tile, the weights are the MMA's A operand and never pass through shared
// memory as f16: lane (g, t) of warp w decodes piece 4kt + t of weight rows n0 + 16w + g and
// + 8 with the shared Piece<T> front end straight into registers, which are exactly the A
// fragments of wgmma .m64nBTk16 (each warp of a warpgroup supplies 16 rows of the 64, laid out
// as mma.m16n8k16's A; K permuted inside each 128-step as in gemm_swap_body). The BT x rows are
// the B operand, f16 in shared memory, K-major with the 128-byte swizzle: per stage two halves
// of [BT rows][64 halves] (128 bytes a row, 16-byte chunk c of row r at chunk c ^ (r & 7)), each
// half 1024-byte aligned, read by the tensor cores through a matrix descriptor (no ldmatrix).
// x arrives already in that K order as f16 (GemmArgs::xh, written by x_f16_perm), so its rows
// move by 16-byte cp.async straight into the swizzled stage, through the same S-deep ring as
// the weight bytes: no registers, no conversion and no load latency inside the K loop.
// Block: 256 threads = 2 warpgroups, 128 weight rows x BT x rows; accumulators BT / 2 f32 per
// thread.
//
// Pipeline per K step kt (WG_BK = 128 = 4 pieces of every row), stage kt % S:
//   wgmma.fence; 8 wgmma (k16 blocks kk) from the A registers of step kt and x stage kt; commit
//   (the tensor cores run while the thread goes on);
//   cp.async of step kt + S - 1 (the thread's weight pieces, its x chunks) into the stage step
//   kt - 1 used (its MMAs were waited for before the last barrier);
//   wait for step kt + 1's copies, decode its weights into the other set of A registers;
//   fence.proxy.async (cp.async writes are generic-proxy, the tensor cores read through the
//   async proxy); wgmma.wait_group 0; __syncthreads.
// So the decode of step kt + 1 overlaps the MMAs of step kt and the copies run S - 1 steps
// ahead. The loop is unrolled by two: the two A register sets are named, not indexed at run time.
//
// Grid: (ceil(N / 128), tiles) as for the other tiles (dense: ceil(M / BT); MoE: moe_route with
// bm = BT). 256 threads, dynamic smem WG_SMEM_BYTES(t, BT) (> 48 KB: raise the limit first).
// Preconditions: those of gemm_<t>, with K % 128 == 0, xh 16-byte aligned and ldxh % 8 == 0
// (else nothing is written). Precision: as gemm_<t> (f16 operands, f32 accumulation). S =
// WG_STAGES(t): 4 for weight slots of up to 32 bytes a piece, 3 up to 64, else 2.
#define WG_BK SWP_BK
// Lab timing ablations of gemm_ws_body's K loop (a bit mask, 0 but in lab builds with
// -DTALLY_WG_ABL=N: 1 no x copies, 2 no weight copies, 4 no decode, 16 no MMAs; the results are
// wrong by design). Call 1 of docs/results/2026-12-05-h100-stop36 ran the same on gemm_wg_body
// (hooks since removed: that tree has them).
#ifndef TALLY_WG_ABL
#define TALLY_WG_ABL 0
#endif
#define WG_STAGES(t) (GEMM_SLOT_BYTES(t) <= 32 ? 4 : GEMM_SLOT_BYTES(t) <= 64 ? 3 : 2)
// 1024 bytes of alignment slack, S x stages of two 1024-aligned halves, two row tables, the ring.
#define WG_SMEM_BYTES(t, bt) \
    (1024 + WG_STAGES(t) * 2 * (bt) * 128 + 8 * (bt) + WG_STAGES(t) * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))

// x_f16_perm: x (f32, M rows of K, leading dimension ldx) as f16 in the wgmma tiles' K order:
// out[m][128 s + k'] = x[m][128 s + k] where, inside each 128-step, element 4i + e (e < 4) of
// piece tq (of the four a step holds) sits at k' = 16i + 8 (e / 2) + 2 tq + e % 2; piece tq's
// elements are those of Piece<T> (K-quants: 64 (tq / 2) + 16 (tq % 2) + [0, 16) and + 32;
// the other formats: 32 tq + [0, 32)), so `kquant` picks the order. One thread per 16-byte
// chunk of the output (k' = 8c .. 8c + 7: one pair of consecutive x values from each of the
// four pieces, i = c / 2, e / 2 = c % 2): grid ceil(M * K / 8 / 256), 256 threads; out rows of
// ldo halves, 16-byte aligned (the tiles copy them in 16-byte chunks).
struct XPermArgs {
    const float* x;
    i64 ldx;
    u16* out;
    i64 ldo;
    i32 M;
    i32 K;
    i32 kquant;
    i32 pad0;
};
// Natural K (inside the 128-step) of the first of the pair at permuted position kp (even).
__device__ __forceinline__ int x_perm_source(int kp, bool kquant) {
    const int i = kp >> 4, tq = (kp >> 1) & 3, pe = 4 * i + 2 * ((kp >> 3) & 1) + (kp & 1);
    const int seg0 = kquant ? 64 * (tq >> 1) + 16 * (tq & 1) : 32 * tq;
    return (pe < 16 ? seg0 : seg0 + (kquant ? 32 : 16)) + (pe & 15);
}
extern "C" __global__ void __launch_bounds__(256) x_f16_perm(XPermArgs a) {
    pdl_enter();
    const i64 q = static_cast<i64>(blockIdx.x) * 256 + threadIdx.x;
    const int per_row = a.K / 8;
    if (a.K % 128 != 0 || q >= static_cast<i64>(a.M) * per_row) return;
    const int m = static_cast<int>(q / per_row), kc = static_cast<int>(q % per_row);
    const int s = kc >> 4, kp = 8 * (kc & 15);
    const float* xr = a.x + static_cast<i64>(m) * a.ldx + 128 * s;
    const bool kq = a.kquant != 0, vec = (reinterpret_cast<u64>(xr) & 7u) == 0;
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float* p = xr + x_perm_source(kp + 2 * j, kq);
        const float2 v = vec ? *reinterpret_cast<const float2*>(p) : make_float2(p[0], p[1]);
        w[j] = pack_f16x2(v.x, v.y);
    }
    *reinterpret_cast<uint4*>(a.out + static_cast<i64>(m) * a.ldo + 128 * s + kp) = make_uint4(w[0], w[1], w[2], w[3]);
}

#include "wgmma.cuh"

// Shared by gemm_wg_body and gemm_wgx_body.
// x chunk i of thread tid in one K step of a BT-row x tile: its source (row s_xrow[r], 16-byte
// chunk c of the step's 128 halves) and its offset in the swizzled stage (half c / 8, chunk c % 8
// swizzled by the row).
template <int BT>
__device__ __forceinline__ void wg_x_chunk(const GemmArgs& a, const i32* s_xrow, int tid, int i, const u16*& src,
                                           u32& dst) {
    const int j = tid + GEMM_THREADS * i, r = j >> 4, c = j & 15;
    src = a.xh + static_cast<i64>(s_xrow[r]) * a.ldxh + 8 * c;
    dst = static_cast<u32>((c >> 3) * (BT * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
// The 8 k16 blocks of one K step: A {rows g, g + 8} x {k' 2t.., 8 + 2t..} from h0/h1; B from the
// x stage at shared address xa, half kk / 4, 32 bytes further per k16 block inside the rows.
// fresh: the step's first MMA overwrites the accumulators (a block's first K step in the
// x-resident tile: no zeroing between blocks, which would put non-wgmma writes of them inside
// its pipelined loop).
template <int BT>
__device__ __forceinline__ void wg_mma_step(float (&acc)[BT / 2], u32 xa, const u32 (&h0)[16], const u32 (&h1)[16],
                                            bool fresh = false) {
#pragma unroll
    for (int kk = 0; kk < WG_BK / 16; kk++) {
        const u32 af[4] = {h0[2 * kk], h1[2 * kk], h0[2 * kk + 1], h1[2 * kk + 1]};
        Wgmma<BT>::mma(acc, af, wg_desc(xa + (kk >> 2) * (BT * 128) + 32 * (kk & 3)), kk == 0 && fresh ? 0 : 1);
    }
}
// Epilogue: acc[4j + e] is weight row r0 + 8 (e >> 1) (output column), token 8j + 2t + (e & 1).
template <int BT>
__device__ __forceinline__ void wg_store(const GemmArgs& a, const i32* s_yrow, int r0, int t, const float (&acc)[BT / 2]) {
    const bool split = a.layout == 1;
#pragma unroll
    for (int j = 0; j < BT / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int yr = s_yrow[8 * j + 2 * t + (e & 1)];
            const int n = r0 + 8 * (e >> 1);
            if (yr >= 0 && n < a.N)
                a.y[static_cast<i64>(yr) * a.ldy + gemm_out_col(n, split, a.head_dim, a.n_head)] = acc[4 * j + e];
        }
    }
}

// The gated tiles (gemm_<t>_g<BT>: the routed experts' gate, up and SwiGlu in one launch): lane
// (g, t) of warp w takes output column r0 = n0 + 8 w + g, row r0 of the gate weight (a.w) as its
// A row g and row r0 of the up weight (a.w2, the same expert's: the same expert stride) as A row
// g + 8, clamped as swap_rows clamps (columns past N are computed and not stored). A block covers
// 64 output columns (BN / 2) for both projections.
__device__ __forceinline__ int gated_rows(const GemmArgs& a, const u8* w, int n0, int warp, int g, const u8*& wrow0,
                                          const u8*& wrow1) {
    const int r0 = n0 + 8 * warp + g;
    const i64 off = static_cast<i64>(min(r0, a.N - 1)) * a.w_row_bytes;
    wrow0 = w + off;
    wrow1 = a.w2 + (w - a.w) + off;
    return r0;
}
// Epilogue of the gated tiles: acc[4j + e] for e < 2 is the gate's sum for column n, token 8j +
// 2t + e, and acc[4j + e + 2] the up's for the same (A row g + 8); y3 = silu(gate) * up, the
// binary map's SwiGlu expression, so each output is the unfused launches' bit for bit where the
// sums are (the same tile height, K order and MMAs as gemm_<t>_w<BT>).
template <int BT>
__device__ __forceinline__ void wg_store_gated(const GemmArgs& a, const i32* s_yrow, int n, int t,
                                               const float (&acc)[BT / 2]) {
    if (n >= a.N) return;
#pragma unroll
    for (int j = 0; j < BT / 8; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int yr = s_yrow[8 * j + 2 * t + e];
            if (yr >= 0) a.y3[static_cast<i64>(yr) * a.ldy3 + n] = tally_silu(acc[4 * j + e]) * acc[4 * j + e + 2];
        }
    }
}

// PIPE (with S >= 4; else the schedule above): the MMAs of step kt stay in flight across the
// barrier. Per step: MMAs of kt issued and committed; copies of step kt + S - 2 into the stage of
// step kt - 2 (every warp's MMAs of kt - 2 were waited for before the previous barrier); wait for
// step kt + 1's copies; wgmma.wait_group 1 (this thread's MMAs of kt - 1 done: their registers
// are free); decode step kt + 1 into them; proxy fence; __syncthreads. So the tensor cores hold
// step kt's MMAs while the block passes its barrier and step kt + 1's are queued behind them,
// at the price of one stage of copy lead (S - 2 steps instead of S - 1). The engine's w128 asks
// for it. lab/gemm on the H200 (docs/results/2026-12-04-h200-wgx): Q4_K MoE gate/up at 8,192
// tokens 0.662 -> 0.644 ms, the Q4_K down 1.346 -> 1.229; with S = 3 it lost (Q8_0 dense q
// 1.237 -> 1.351, Q5_K gate/up at 512 tokens 0.441 -> 0.488: one step of copy lead is none).
// GATED: the gated tile (above): rows from gated_rows, 64 output columns a block, y3 written
// (nothing else); needs w2 and y3 and the plain layout (else nothing is written).
// ABL (lab builds only, timing ablations; the results are wrong by design): a bit mask as
// TALLY_WG_ABL's: 1 no x copies, 2 no weight copies, 4 no decode, 16 no MMAs (the decoded
// registers are then folded into one accumulator so the decode stays live), 32 (gated Q4_K) the
// weight copies from contiguous addresses (see issue).
template <int T, int BT, bool PIPE_ASKED = false, bool GATED = false, int ABL = 0>
__device__ __forceinline__ void gemm_wg_body(const GemmArgs& a) {
    constexpr int BN = SWP_BN, BK = WG_BK, S = WG_STAGES(T), SW = Piece<T>::SLOT_WORDS;
    constexpr bool PIPE = PIPE_ASKED && S >= 4;
    constexpr int XC = BT * 16 / GEMM_THREADS;  // 16-byte x chunks per thread per stage
    constexpr int XSTAGE = 2 * BT * 128;        // bytes of one x stage
    static_assert(BT == 16 || BT == 32 || BT == 64 || BT == 128, "BT");
    static_assert(BN == 128 && GEMM_THREADS == 256, "two warpgroups of 64 weight rows");
    static_assert(BK == 128, "four pieces per row per step");
    static_assert(SW * 4 == GEMM_SLOT_BYTES(T), "GEMM_SLOT_BYTES");
    static_assert(XC >= 1 && XC * GEMM_THREADS == BT * 16, "whole x chunks per thread");

    TALLY_DYNAMIC_SMEM(smem);
    u8* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);
    u8* Xs = base;                                                  // [S][2][BT][128 bytes]
    i32* s_xrow = reinterpret_cast<i32*>(base + S * XSTAGE);       // [BT] input row (valid)
    i32* s_yrow = s_xrow + BT;                                      // [BT] output row or -1
    u32* ring = reinterpret_cast<u32*>(s_yrow + BT);                // [S][2][SW/4][threads] x 16 B

    if (a.xh == nullptr || (reinterpret_cast<u64>(a.xh) & 15u) != 0 || (a.ldxh & 7) != 0) return;
    if (GATED && (a.w2 == nullptr || a.y3 == nullptr || a.layout != 0)) return;
    int n0;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, GATED ? BN / 2 : BN, BT, n0, w, s_xrow, s_yrow)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

    const u8 *wrow0, *wrow1;
    const int r0 = GATED ? gated_rows(a, w, n0, warp, g, wrow0, wrow1) : swap_rows(a, w, n0, warp, g, wrow0, wrow1);
    // x copies: chunk j = tid + 256 i of a stage is row j / 16, 16-byte chunk c = j % 16 (k' 8c..
    // 8c + 7: half c / 8, chunk c % 8 swizzled by the row).
    const u16* xsrc[XC];
    u32 xdst[XC];
#pragma unroll
    for (int i = 0; i < XC; i++) wg_x_chunk<BT>(a, s_xrow, tid, i, xsrc[i], xdst[i]);

    u32 ha0[16], ha1[16], hb0[16], hb1[16];
    float acc[BT / 2];
#pragma unroll
    for (int j = 0; j < BT / 2; j++) acc[j] = 0.0f;

    auto slot = [&](int kt, int j) {
        return Slot{ring + (kt % S) * (2 * SW * GEMM_THREADS) + j * (SW * GEMM_THREADS) + 4 * tid, 4 * GEMM_THREADS};
    };
    // Step kt's copies into ring slot / x stage `slot_of` % S.
    auto issue = [&](int kt, int slot_of) {
        if constexpr ((ABL & 32) && GATED && T == QT_Q4_K) {
            // Timing only: as many 16-byte copies as the tile made before its lanes shared the
            // header (four a thread and step), from addresses that make each step of the block
            // one contiguous stretch per projection (64 bytes a row, in row order).
            const u8* b0 = w + static_cast<i64>(n0) * a.w_row_bytes + kt * 4096 + (8 * warp + g) * 64;
            const u8* b1 = b0 + (a.w2 - a.w);
            cp_async16(slot(slot_of, 0).w(0), b0);
            cp_async16(slot(slot_of, 0).w(4), b0 + 16 * t);
            cp_async16(slot(slot_of, 1).w(0), b1);
            cp_async16(slot(slot_of, 1).w(4), b1 + 16 * t);
        } else if constexpr (!(ABL & 2)) {
            swap_issue<T>(slot(slot_of, 0), slot(slot_of, 1), wrow0, wrow1, 4 * kt + t, t);
        }
        if constexpr (!(ABL & 1)) {
            u8* X = Xs + (slot_of % S) * XSTAGE;
#pragma unroll
            for (int i = 0; i < XC; i++) cp_async16(X + xdst[i], xsrc[i] + BK * kt);
        }
    };
    auto decode_w = [&](int kt, u32 (&h0)[16], u32 (&h1)[16]) {
        if constexpr (!(ABL & 4)) swap_decode<T>(slot(kt, 0), slot(kt, 1), wrow0, wrow1, 4 * kt + t, t, h0, h1);
    };
    // Step kt's MMAs, B from x stage kt % S.
    auto mma = [&](int kt, const u32 (&h0)[16], const u32 (&h1)[16]) {
        if constexpr (ABL & 16) {
            u32 f = 0;
#pragma unroll
            for (int j = 0; j < 16; j++) f ^= h0[j] ^ h1[j];
            acc[0] += __uint_as_float(f & 0x3fffffffu);
        } else {
            wg_mma_step<BT>(acc, smem_u32(Xs + (kt % S) * XSTAGE), h0, h1);
        }
    };
    const int KT = a.K / BK;
    // One step: the MMAs of step kt run while the thread copies step kt + S - 1 and decodes
    // step kt + 1. Past the end, step indices are clamped to KT - 1 (the copies carry the last
    // step again into stages nobody reads any more; the last decode is unused): no branches
    // between the MMAs and the barrier. One cp.async group per step, so waiting until S - 2
    // groups remain pending means step kt + 1 has landed.
    auto step = [&](int kt, const u32 (&c0)[16], const u32 (&c1)[16], u32 (&n0)[16], u32 (&n1)[16]) {
        wg_fence();
        mma(kt, c0, c1);
        wg_commit();
        issue(min(kt + S - 1, KT - 1), kt + S - 1);
        cp_async_commit();
        cp_async_wait<S - 2>();
        decode_w(min(kt + 1, KT - 1), n0, n1);
        // Measured free on the H200 (lab/gemm, docs/results/2026-12-04-h200-wgmma: the same
        // times without it): this thread's landed x copies, to the async proxy.
        fence_proxy_async();
        wg_wait<0>();
        __syncthreads();
    };

    // The pipelined step (PIPE): see above. Group accounting: before the wait, steps 0..kt + S - 2
    // are issued (one group each), so at most S - 3 pending means step kt + 1 has landed.
    auto step_p = [&](int kt, const u32 (&c0)[16], const u32 (&c1)[16], u32 (&n0)[16], u32 (&n1)[16]) {
        wg_fence();
        mma(kt, c0, c1);
        wg_commit();
        issue(min(kt + S - 2, KT - 1), kt + S - 2);
        cp_async_commit();
        cp_async_wait<(S >= 3 ? S - 3 : 0)>();
        wg_wait<1>();
        decode_w(min(kt + 1, KT - 1), n0, n1);
        fence_proxy_async();
        __syncthreads();
    };

    constexpr int LEAD = PIPE ? S - 2 : S - 1;  // steps copied before the loop
#pragma unroll
    for (int i = 0; i < LEAD; i++) {
        issue(min(i, KT - 1), i);
        cp_async_commit();
    }
    cp_async_wait<LEAD - 1>();
    decode_w(0, ha0, ha1);
    fence_proxy_async();
    __syncthreads();
    if constexpr (PIPE) {
        for (int kt = 0; kt < KT; kt += 2) {
            step_p(kt, ha0, ha1, hb0, hb1);
            if (kt + 1 < KT) step_p(kt + 1, hb0, hb1, ha0, ha1);
        }
        wg_wait<0>();
    } else {
        for (int kt = 0; kt < KT; kt += 2) {
            step(kt, ha0, ha1, hb0, hb1);
            if (kt + 1 < KT) step(kt + 1, hb0, hb1, ha0, ha1);
        }
    }
    cp_async_wait<0>();

    if constexpr (GATED) wg_store_gated<BT>(a, s_yrow, r0, t, acc);
    else wg_store<BT>(a, s_yrow, r0, t, acc);
}

// gemm_<t>_gs128: the gated wgmma tile of 128 weight rows (64 gate + 64 up) x 128 x rows with
// its warps specialised. Issue 14: gemm_<t>_g128 ran at ~30% of the tensor pipe on the H100,
// two warps a scheduler each loading, decoding and multiplying in turn with a block barrier a K
// step, and taking any one of those parts away (lab ablations, TALLY_WG_ABL) saved only 5-14%
// (docs/results/2026-12-05-h100-stop36).
// 512 threads: warps 0-7 (two warpgroups, the consumers) only multiply; warps 8-15 (the
// decoders) only copy and decode. Decoder warp dw takes what warp dw of gemm_wg_body takes (the
// same weight rows, pieces, x chunks), but stores its decoded A fragments to the shared A stage
// (f16, K-major, the 128-byte swizzle of the x stages: rows 16 dw + g and + 8, the pair at k' =
// 16 kk + 8 e + 2t in chunk 2 (kk & 3) + e of half kk / 4) instead of keeping them in registers;
// consumer warpgroup c multiplies A rows 64c.. (both operands from shared memory through
// descriptors) into the accumulators warp c's own warps hold in gemm_wg_body, so the epilogue
// and every sum are gemm_wg_body's: the same products in the same k16 order, bit for bit
// (lab/gemm --gated on the H100; the emulator's `ws`).
// Stages: x WS_XSTAGES (4), A WS_ASTAGES (1), the decoders' private weight ring WS_RSTAGES (3);
// copies run three steps ahead. Per K step kt, with two named barriers (FULL = 1, EMPTY = 2;
// 512 threads each: one side arrives, the other waits):
//   decoder: wait for its copies of step kt; decode into registers; wait EMPTY (kt >= 1: the
//            consumers are done with step kt - 1, so the A stage and x stage (kt + 3) % 4 are
//            free); store A(kt); proxy fence; arrive FULL; copy step kt + 3 (x into stage
//            (kt + 3) % 4; weights into its ring slot of step kt, decoded above).
//   consumer: wait FULL; 8 wgmma of step kt; commit; wait for them; arrive EMPTY (kt < KT - 1).
// The decode of step kt + 1 runs beside the MMAs of step kt; the tensor cores idle while the A
// stores of step kt + 1 land. No barrier's phases overlap: a decoder arrives FULL(kt) only after
// its wait for EMPTY(kt - 1), which the consumers arrive after passing FULL(kt - 1); they arrive
// EMPTY(kt) only after FULL(kt), which follows the decoders' wait for EMPTY(kt - 1).
// Measured against two A stages and two steps of copy lead (x stages 3, ring 2), H100, Q4_K
// 35B gate/up: 8,192 tokens 1.057 ms against 1.281 (g128 1.240), 2,048 0.471 against 0.534, 512
// 0.582 against 0.657 (stop36c). Without MMAs (TALLY_WG_ABL=16) it still takes 0.89 ms at 8,192
// tokens: the decoders' copy-decode-store stream is now the limit.
// Grid as gemm_<t>_g128, 512 threads, dynamic smem WS_SMEM_BYTES(t) (~210 KB for 32-byte slots:
// Q4_K, IQ4_XS, MXFP4, the 4-bit legacy types; the larger slots do not fit and keep g128).
// Preconditions, precision and outputs: gemm_<t>_g128's.
// (WS_THREADS 512, WS_XSTAGES 4, WS_ASTAGES 1, WS_RSTAGES 3: consts.rs.)
#define WS_SMEM_BYTES(t)                                                                                 \
    (1024 + WS_XSTAGES * 2 * 128 * 128 + WS_ASTAGES * 2 * SWP_BN * 128 + 8 * 128 +                       \
     WS_RSTAGES * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))
// gemm_<t>_gs256: the same tile over 256 x rows (two halves of 128), so each weight a block
// decodes serves twice the tokens: at 8,192 tokens (256 rows per expert) the gs128 launch was
// bound by its decoders' copy-decode-store stream (no MMAs: 0.89 of 1.06 ms), and the decode work
// per token is what halves here. Consumer warpgroup c keeps gs128's 64 weight rows against both
// halves: two m64n128k16 per k16 (accumulators acc0, acc1: 128 f32 a thread, hence setmaxnreg:
// consumers 160 registers, decoders 96), the second only where the tile has more than 128 rows
// (a block-uniform choice made outside the K loop: no wgmma on a divergent path). Each output's
// sum is the same k16 sequence of the same products as in gs128 and w128: the same bits.
// Stages: x WS256_XSTAGES (2: 64 KB each), A 1, the decoders' weight ring WS256_RSTAGES (3).
// The x copies of step kt + 1 go out after FULL(kt) (into the stage of step kt - 1, free since
// EMPTY(kt - 1)) and must land before FULL(kt + 1); the weights go WS256_RSTAGES steps ahead in
// their own cp.async group: per step kt the decoder commits {x of kt + 1} then {weights of kt +
// RS}, so before decoding step kt the weights of kt have 2 (RS - 1) newer groups and before
// FULL(kt) the x of kt has one (the prologue plays steps -RS .. -1 with empty x groups).
// Grid as gs128's but with the routing tables of 256-row tiles; 512 threads; dynamic smem
// WS256_SMEM_BYTES(t) (~211 KB for 32-byte slots; the larger slots do not fit).
#define WS256_SMEM_BYTES(t)                                                                                \
    (1024 + WS256_XSTAGES * 2 * 256 * 128 + WS_ASTAGES * 2 * SWP_BN * 128 + 8 * 256 +                    \
     WS256_RSTAGES * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))
#define WS256_CONSUMER_REGS 160
#define WS256_DECODER_REGS 96
// gemm_<t>_gs256a (TALLY_WS256=a2, opt-in): gs256 with two A stages, so the decoders store step
// kt + 1's A while the tensor cores still run step kt's MMAs. In gs256 the one A stage made each
// step's MMAs wait for the decoders' store of its A, which waited for the previous MMAs (stop
// 46's ncu: the consumers stalled at FULL for 27-35% of the samples). Per step kt the decoders
// now store A(kt) into stage kt % 2 (free since EMPTY(kt - 2), waited for a step before), arrive
// FULL(kt), and only then wait EMPTY(kt - 1) (before the x copies of kt + 1 go into the x stage
// step kt - 1 used). Decoders and consumers are then up to a step apart, so FULL and EMPTY each
// alternate between two named barriers by the step's parity (one barrier's arrivals of steps kt
// and kt + 2 are a full round of the other side apart: no phase is overrun). The weight ring
// keeps WS256A_RSTAGES (2, consts.rs) stages to make room: 227 KB exactly for 32-byte slots
// (Q4_K, MXFP4, IQ4_XS, IQ4_NL, Q4_0, Q4_1, Q5_1 fit), no code for the rest. The same products
// in the same order: gs256's outputs bit for bit (the emulator's ws256a). Written in stop 53
// without a GPU: untimed.
#define WS256A_SMEM_BYTES(t)                                                                             \
    (1024 + WS256_XSTAGES * 2 * 256 * 128 + 2 * 2 * SWP_BN * 128 + 8 * 256 +                             \
     WS256A_RSTAGES * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))
#ifndef TALLY_EMU
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
#endif
// The named barriers of gemm_ws_body: FULL (decoders arrive, consumers wait) and EMPTY (the
// reverse) of step kt; with two A stages (A2) each alternates between two barriers by parity.
template <bool A2>
__device__ __forceinline__ int ws_bar_full(int kt) {
    return A2 ? 1 + 2 * (kt & 1) : 1;
}
template <bool A2>
__device__ __forceinline__ int ws_bar_empty(int kt) {
    return A2 ? 2 + 2 * (kt & 1) : 2;
}
// The consumers' K loop of gemm_ws_body: H halves of 128 x rows (H = 2 only for BT = 256); A2:
// step kt's A in stage kt % 2 (astage bytes apart).
template <int BT, int H, bool A2 = false>
__device__ __forceinline__ void ws_consume(u8* Xs, u32 aa, int KT, float (&acc0)[64], float (&acc1)[64]) {
    constexpr int BK = WG_BK, BN = SWP_BN, XS = BT == 128 ? WS_XSTAGES : WS256_XSTAGES;
    constexpr int XSTAGE = 2 * BT * 128, ASTAGE = 2 * BN * 128;
    for (int kt = 0; kt < KT; kt++) {
        named_bar_sync(ws_bar_full<A2>(kt), WS_THREADS);
        const u32 xa = smem_u32(Xs + (kt % XS) * XSTAGE);
        const u32 ak = A2 ? aa + (kt & 1) * ASTAGE : aa;
        if (!(TALLY_WG_ABL & 16)) {  // lab ablation 16: no MMAs
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                const u64 ad = wg_desc(ak + (kk >> 2) * (BN * 128) + 32 * (kk & 3));
                const u32 xk = xa + (kk >> 2) * (BT * 128) + 32 * (kk & 3);
                WgmmaSS<128>::mma(acc0, ad, wg_desc(xk));
                if constexpr (H == 2) WgmmaSS<128>::mma(acc1, ad, wg_desc(xk + 128 * 128));
            }
            wg_commit();
        }
        wg_wait<0>();  // step kt's MMAs done: the A stage and x stage kt % XS are free
        if (kt + 1 < KT) named_bar_arrive(ws_bar_empty<A2>(kt), WS_THREADS);
    }
}
template <int T, int BT = 128, bool A2 = false>
__device__ __forceinline__ void gemm_ws_body(const GemmArgs& a) {
    constexpr int BN = SWP_BN, BK = WG_BK, SW = Piece<T>::SLOT_WORDS, DT = GEMM_THREADS;
    constexpr bool WIDE = BT == 256;
    constexpr int XS = WIDE ? WS256_XSTAGES : WS_XSTAGES;
    constexpr int RS = WIDE ? (A2 ? WS256A_RSTAGES : WS256_RSTAGES) : WS_RSTAGES;
    constexpr int AST = A2 ? 2 : WS_ASTAGES;  // A stages
    constexpr int LEAD = WIDE ? RS : XS - 1;  // steps whose weights are copied ahead
    constexpr int XC = BT * 16 / DT;
    constexpr int XSTAGE = 2 * BT * 128, ASTAGE = 2 * BN * 128;
    static_assert(BT == 128 || BT == 256, "BT");
    static_assert(!A2 || WIDE, "two A stages: the wide tile only");
    static_assert(BN == 128 && DT == 256, "eight decoder warps of 16 weight rows, two consumer warpgroups");
    static_assert(BK == 128, "four pieces per row per step");
    static_assert(SW * 4 == GEMM_SLOT_BYTES(T), "GEMM_SLOT_BYTES");
    static_assert(WS_ASTAGES == 1 && RS >= LEAD, "one A stage (A2: two); a ring slot free when its step is copied");
    static_assert(!WIDE || XS == 2, "the wide tile's x copies run one step ahead");

    TALLY_DYNAMIC_SMEM(smem);
    u8* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);
    u8* Xs = base;                                          // [XS][2][BT][128 bytes]
    u8* As = Xs + XS * XSTAGE;                              // [AST][2][BN][128 bytes]
    i32* s_xrow = reinterpret_cast<i32*>(As + AST * ASTAGE);  // [BT]
    i32* s_yrow = s_xrow + BT;                              // [BT]
    u32* ring = reinterpret_cast<u32*>(s_yrow + BT);        // [RS][2][SW/4][256] x 16 B

    if (blockDim.x != WS_THREADS) return;
    if (a.xh == nullptr || (reinterpret_cast<u64>(a.xh) & 15u) != 0 || (a.ldxh & 7) != 0) return;
    if (a.w2 == nullptr || a.y3 == nullptr || a.layout != 0) return;
    int n0, rows = 0;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, BN / 2, BT, n0, w, s_xrow, s_yrow, &rows)) return;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int KT = a.K / BK;
    const bool two = WIDE && rows > 128;  // block-uniform: the second half has rows

    if (tid >= DT) {  // a decoder
        if constexpr (WIDE) setmaxnreg_dec<WS256_DECODER_REGS>();
        const int dtid = tid - DT, dw = dtid >> 5;
        const u8 *wrow0, *wrow1;
        gated_rows(a, w, n0, dw, g, wrow0, wrow1);
        // gs128: every x chunk's source and destination kept (wg_x_chunk). gs256 (16 chunks a
        // thread): chunk i is row dtid / 16 + 16 i, the same 16-byte column c = dtid % 16, so its
        // destination is chunk 0's + 2,048 i and its source row is read from the table.
        const u16* xsrc[WIDE ? 1 : XC];
        u32 xdst[WIDE ? 1 : XC];
        if constexpr (WIDE) {
            wg_x_chunk<BT>(a, s_xrow, dtid, 0, xsrc[0], xdst[0]);
        } else {
#pragma unroll
            for (int i = 0; i < XC; i++) wg_x_chunk<BT>(a, s_xrow, dtid, i, xsrc[i], xdst[i]);
        }
        auto slot = [&](int kt, int j) {
            return Slot{ring + (kt % RS) * (2 * SW * DT) + j * (SW * DT) + 4 * dtid, 4 * DT};
        };
        // TALLY_WG_ABL (lab ablations, timing only): 1 no x copies, 2 no weight copies, 4 no decode.
        auto issue_w = [&](int kt) {
            if (kt < KT && !(TALLY_WG_ABL & 2)) swap_issue<T>(slot(kt, 0), slot(kt, 1), wrow0, wrow1, 4 * kt + t, t);
        };
        auto issue_x = [&](int kt) {
            if (kt < KT && !(TALLY_WG_ABL & 1)) {
                u8* X = Xs + (kt % XS) * XSTAGE;
                if constexpr (WIDE) {
                    const int r0 = dtid >> 4, c = dtid & 15;
#pragma unroll
                    for (int i = 0; i < XC; i++) {
                        if (i < XC / 2 || two)
                            cp_async16(X + xdst[0] + 2048 * i,
                                       a.xh + static_cast<i64>(s_xrow[r0 + 16 * i]) * a.ldxh + 8 * c + BK * kt);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < XC; i++) cp_async16(X + xdst[i], xsrc[i] + BK * kt);
                }
            }
        };
        // gs128: step kt's copies in one group (empty past the last step).
        auto issue = [&](int kt) {
            issue_w(kt);
            issue_x(kt);
            cp_async_commit();
        };
        const int R0 = 16 * dw + g, R1 = R0 + 8;
        auto a_off = [&](int r, int kk, int e) {
            return (kk >> 2) * (BN * 128) + r * 128 + (((2 * (kk & 3) + e) ^ (r & 7)) << 4) + 4 * t;
        };
        if constexpr (WIDE) {
#pragma unroll
            for (int s = -RS; s < 0; s++) {  // steps -RS .. -1: {x of s + 1} {weights of s + RS}
                if (s + 1 >= 0) issue_x(s + 1);
                cp_async_commit();
                issue_w(s + RS);
                cp_async_commit();
            }
        } else {
#pragma unroll
            for (int i = 0; i < LEAD; i++) issue(i);
        }
        u32 h0[16], h1[16];
#pragma unroll
        for (int j = 0; j < 16; j++) h0[j] = h1[j] = 0;
        for (int kt = 0; kt < KT; kt++) {
            // Step kt's weights (gs128: and x; the later groups may still be in flight).
            if constexpr (WIDE) cp_async_wait<2 * (RS - 1)>();
            else cp_async_wait<LEAD - 1>();
            if (!(TALLY_WG_ABL & 4)) swap_decode<T>(slot(kt, 0), slot(kt, 1), wrow0, wrow1, 4 * kt + t, t, h0, h1);
            // One A stage: wait until step kt - 1's MMAs are done with it. A2: stage kt % 2 was
            // freed by EMPTY(kt - 2), waited for after FULL(kt - 1).
            if (!A2 && kt >= 1) named_bar_sync(ws_bar_empty<A2>(kt - 1), WS_THREADS);
            u8* Ak = A2 ? As + (kt & 1) * ASTAGE : As;
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                *reinterpret_cast<u32*>(Ak + a_off(R0, kk, 0)) = h0[2 * kk];
                *reinterpret_cast<u32*>(Ak + a_off(R0, kk, 1)) = h0[2 * kk + 1];
                *reinterpret_cast<u32*>(Ak + a_off(R1, kk, 0)) = h1[2 * kk];
                *reinterpret_cast<u32*>(Ak + a_off(R1, kk, 1)) = h1[2 * kk + 1];
            }
            if constexpr (WIDE) cp_async_wait<1>();  // step kt's x (the weights of kt + RS - 1 may fly)
            fence_proxy_async();  // the A stores and this thread's landed x copies, to the tensor cores
            named_bar_arrive(ws_bar_full<A2>(kt), WS_THREADS);
            // A2: the consumers done with step kt - 1 (its x stage takes step kt + 1's x below,
            // its A stage step kt + 1's A).
            if (A2 && kt >= 1) named_bar_sync(ws_bar_empty<A2>(kt - 1), WS_THREADS);
            // Step kt + LEAD's weights go to the ring slot just decoded, whose shared part (gemm.cu
            // swap_issue) its lead lane rewrites: every lane has read it (before EMPTY for kt >=
            // 1; here for kt = 0).
            if constexpr (swap_shared<T>()) __syncwarp();
            if constexpr (WIDE) {
                issue_x(kt + 1);  // into the stage of step kt - 1 (free since EMPTY(kt - 1))
                cp_async_commit();
                issue_w(kt + RS);
                cp_async_commit();
            } else {
                issue(kt + LEAD);
            }
        }
        cp_async_wait<0>();
        return;
    }

    // A consumer: warp `warp` of warpgroup wgi, the accumulators of gemm_wg_body's warp `warp`
    // (and, in gs256, the same for the second 128 x rows).
    if constexpr (WIDE) setmaxnreg_inc<WS256_CONSUMER_REGS>();
    const int warp = tid >> 5, wgi = warp >> 2;
    const u8 *wrow0, *wrow1;
    const int r0 = gated_rows(a, w, n0, warp, g, wrow0, wrow1);
    float acc0[64];
#pragma unroll
    for (int j = 0; j < 64; j++) acc0[j] = 0.0f;
    const u32 aa = smem_u32(As) + wgi * 64 * 128;
    if constexpr (WIDE) {
        float acc1[64];
#pragma unroll
        for (int j = 0; j < 64; j++) acc1[j] = 0.0f;
        if (two) ws_consume<BT, 2, A2>(Xs, aa, KT, acc0, acc1);
        else ws_consume<BT, 1, A2>(Xs, aa, KT, acc0, acc1);
        wg_store_gated<128>(a, s_yrow, r0, t, acc0);
        if (two) wg_store_gated<128>(a, s_yrow + 128, r0, t, acc1);
    } else {
        ws_consume<BT, 1>(Xs, aa, KT, acc0, acc0);  // one half: the second is never touched
        wg_store_gated<BT>(a, s_yrow, r0, t, acc0);
    }
}

// gemm_<t>_x<BT>: the wgmma tile for short K (K <= WGX_K_MAX: the MoE down projection, K = 512
// on this model) with x resident. A block copies its BT x rows' whole K once (as f16 in the
// wgmma tiles' K order, every K step's swizzled stage side by side), then walks weight-row
// blocks nb = blockIdx.x, + gridDim.x, ... (BN = 128 rows each; gridDim.x = 1: all N) streaming
// only weight pieces through each thread's private ring slots. Nothing in the loop is shared
// between threads but x, which no one writes after the start: no barrier after the first, so
// the warps and the two warpgroups drift apart and one's decode runs beside the other's MMAs.
// Against gemm_<t>_w<BT> at K = 512 (4 K steps a block, x re-read for every 128 weight rows,
// the pipeline filled and drained per block), the fill and the x traffic are paid once per x
// tile instead of once per (x tile, weight block).
// Per step s (weight block j = s / KT, K step kt = s % KT): MMAs of s issued and committed;
// copies of step s + S - 1 into the thread's slot of step s - 1 (decoded one step ago); wait
// for step s + 1's copies; wgmma.wait_group 1 (the MMAs of s - 1 done: their A registers
// free); decode step s + 1; at a block's last K step, wait for all MMAs and store the block's
// outputs. A block's first K step starts its accumulators with scale-d off (d = a * b) instead of
// zeroing them after the store: ptxas serialised every wgmma of this loop (C7511, "insufficient
// register resources for the wgmma pipeline") while the loop wrote the accumulators itself.
// TALLY_WGX_CLEAR (TALLY_WGX_CLEAR=on) compiles the zeroing form back, for comparison.
// Grid (1..ceil(N / 128), tiles), 256 threads, dynamic smem WGX_SMEM_BYTES(t, BT); otherwise
// the preconditions and precision of gemm_<t>_w<BT>; K > WGX_K_MAX writes nothing.
// (A lab variant, x32g, takes KMAX = 2048: 32 x rows of the gate/up's whole K, 128 KB; it was
// the engine's opt-in for the Q4_K down of short prompts until x32 replaced it.)
#define WGX_K_MAX 512
#define WGX_STAGES(t) (GEMM_SLOT_BYTES(t) <= 32 ? 4 : GEMM_SLOT_BYTES(t) <= 64 ? 3 : 2)
#define WGX_SMEM_BYTES_KS(t, bt, kmax, s) \
    (1024 + ((kmax) / WG_BK) * 2 * (bt) * 128 + 8 * (bt) + (s) * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))
#define WGX_SMEM_BYTES_K(t, bt, kmax) WGX_SMEM_BYTES_KS(t, bt, kmax, WGX_STAGES(t))
#define WGX_SMEM_BYTES(t, bt) WGX_SMEM_BYTES_K(t, bt, WGX_K_MAX)
// gemm_<t>_x32: 32 x rows of K <= WGX_K_MAX (32 KB), so the ring can be deeper than x64's:
// weight slots of up to 48 bytes keep 4 or 3 stages in half an SM's shared memory (two blocks an
// SM: 16 warps), the larger ones 3 stages in one block (Q6_K: 206 KB; x64 fits only 2, so its
// copies of step s + 1 were issued and waited for in the same step). lab/gemm --wg on the H100,
// the 35B down at 512 tokens (16 rows per expert; docs/results/2026-12-06-stop42): Q4_K 0.122
// ms against 0.203 for m32 and 0.149 for x32g, Q6_K 0.269 against 0.336 for x64, Q5_K 0.131
// against 0.268 (m32), MXFP4 0.148 against 0.215 (s32), IQ4_XS 0.166 against 0.198 (s32).
// Grid as x64's: the engine's blocks walk 4 weight blocks each (ops/matmul.rs WgTile::walk).
#define WGX32_STAGES(t) (GEMM_SLOT_BYTES(t) <= 32 ? 4 : 3)
#define WGX32_MIN_BLOCKS(t) (GEMM_SLOT_BYTES(t) <= 48 ? 2 : 1)
#define WGX32_SMEM_BYTES(t) WGX_SMEM_BYTES_KS(t, 32, WGX_K_MAX, WGX32_STAGES(t))

template <int T, int BT, int KMAX = WGX_K_MAX, int S_ASKED = 0>
__device__ __forceinline__ void gemm_wgx_body(const GemmArgs& a) {
    constexpr int BN = SWP_BN, BK = WG_BK, S = S_ASKED > 0 ? S_ASKED : WGX_STAGES(T), SW = Piece<T>::SLOT_WORDS;
    constexpr int XC = BT * 16 / GEMM_THREADS;
    constexpr int XSTAGE = 2 * BT * 128;
    constexpr int KT_MAX = KMAX / BK;
    static_assert(BT == 32 || BT == 64 || BT == 96 || BT == 128, "BT");
    static_assert(BN == 128 && GEMM_THREADS == 256, "two warpgroups of 64 weight rows");
    static_assert(S >= 2, "stages");
    static_assert(XC >= 1 && XC * GEMM_THREADS == BT * 16, "whole x chunks per thread");

    TALLY_DYNAMIC_SMEM(smem);
    u8* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);
    u8* Xs = base;                                                // [KT_MAX][2][BT][128 bytes]
    i32* s_xrow = reinterpret_cast<i32*>(base + KT_MAX * XSTAGE);
    i32* s_yrow = s_xrow + BT;
    u32* ring = reinterpret_cast<u32*>(s_yrow + BT);              // [S][2][SW/4][threads] x 16 B

    if (a.xh == nullptr || (reinterpret_cast<u64>(a.xh) & 15u) != 0 || (a.ldxh & 7) != 0) return;
    if (a.K > KMAX) return;
    int n0_first;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, BN, BT, n0_first, w, s_xrow, s_yrow)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int KT = a.K / BK;
    const int nblk = (a.N + BN - 1) / BN, bx = static_cast<int>(blockIdx.x), gx = static_cast<int>(gridDim.x);
    const int NJ = (nblk - bx + gx - 1) / gx;  // >= 1 (gemm_tile_begin: bx < nblk)
    const int SS = NJ * KT;
    auto n0_of = [&](int s) { return (bx + (s / KT) * gx) * BN; };

    auto slot = [&](int s, int j) {
        return Slot{ring + (s % S) * (2 * SW * GEMM_THREADS) + j * (SW * GEMM_THREADS) + 4 * tid, 4 * GEMM_THREADS};
    };
    auto issue_w = [&](int s, int slot_of) {
        const u8 *r0, *r1;
        swap_rows(a, w, n0_of(s), warp, g, r0, r1);
        swap_issue<T>(slot(slot_of, 0), slot(slot_of, 1), r0, r1, 4 * (s % KT) + t, t);
    };
    auto decode_w = [&](int s, u32 (&h0)[16], u32 (&h1)[16]) {
        const u8 *r0, *r1;
        swap_rows(a, w, n0_of(s), warp, g, r0, r1);
        swap_decode<T>(slot(s, 0), slot(s, 1), r0, r1, 4 * (s % KT) + t, t, h0, h1);
    };
    float acc[BT / 2];
#pragma unroll
    for (int j = 0; j < BT / 2; j++) acc[j] = 0.0f;
#ifdef TALLY_WGX_CLEAR
    constexpr bool kClear = true;
#else
    constexpr bool kClear = false;
#endif
    auto mma = [&](int s, const u32 (&h0)[16], const u32 (&h1)[16]) {
        wg_mma_step<BT>(acc, smem_u32(Xs + (s % KT) * XSTAGE), h0, h1, !kClear && s % KT == 0);
    };
    auto store = [&](int s) {
        wg_store<BT>(a, s_yrow, n0_of(s) + 16 * warp + g, t, acc);
        if (kClear) {
#pragma unroll
            for (int j = 0; j < BT / 2; j++) acc[j] = 0.0f;
        }
    };

    // x: every K step's stage, in the same cp.async group as step 0's weights.
#pragma unroll
    for (int i = 0; i < XC; i++) {
        const u16* src;
        u32 dst;
        wg_x_chunk<BT>(a, s_xrow, tid, i, src, dst);
        for (int kt = 0; kt < KT; kt++) cp_async16(Xs + kt * XSTAGE + dst, src + BK * kt);
    }
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        issue_w(min(i, SS - 1), i);
        cp_async_commit();
    }
    cp_async_wait<S - 2>();
    fence_proxy_async();
    __syncthreads();  // x landed for every thread's MMAs; the only barrier after the row tables

    u32 ha0[16], ha1[16], hb0[16], hb1[16];
    decode_w(0, ha0, ha1);
    auto step = [&](int s, const u32 (&c0)[16], const u32 (&c1)[16], u32 (&n0)[16], u32 (&n1)[16]) {
        wg_fence();
        mma(s, c0, c1);
        wg_commit();
        issue_w(min(s + S - 1, SS - 1), s + S - 1);
        cp_async_commit();
        cp_async_wait<S - 2>();
        wg_wait<1>();
        decode_w(min(s + 1, SS - 1), n0, n1);
        if (s % KT == KT - 1) {
            wg_wait<0>();
            store(s);
        }
    };
    for (int s = 0; s < SS; s += 2) {
        step(s, ha0, ha1, hb0, hb1);
        if (s + 1 < SS) step(s + 1, hb0, hb1, ha0, ha1);
    }
    wg_wait<0>();
    cp_async_wait<0>();
}

// gemm_<t>_xs128: the x-resident tile of gemm_<t>_x128 (gemm_wgx_body above: K <= WGX_K_MAX, the
// MoE down projection; the tile's 128 x rows copied once, a block walking weight blocks nb =
// blockIdx.x, + gridDim.x, ...) with its warps specialised as gemm_ws_body's. Issue 14: at 8,192
// tokens the Q4_K and Q6_K downs on x128 / x96 ran at 177 / 120 TFLOP/s against the gated
// gate/up's ~290 (ncu, 35B shapes; docs/results/2026-12-06-stop46): every thread there copies,
// decodes and multiplies in turn. Here warps 8-15 (the decoders) copy and decode the weights of
// each step s (weight block s / KT, K step s % KT) into the shared A stage, as gemm_wgx_body's
// warp dw decodes into its registers (rows 16 dw + g and + 8 of the block); warps 0-7 (two
// warpgroups) copy x once, then multiply with both operands in shared memory (B: the resident x
// of K step s % KT) into gemm_wgx_body's accumulators, a weight block's first MMA with scale-d
// off, and store them after its last K step (wg_store). FULL / EMPTY as in gemm_ws_body, one
// phase a step across the weight blocks; the consumers' x copies are published by FULL(0)'s
// phase (each fenced its own after waiting for them). The same products in the same k16 order
// as x128: the same outputs bit for bit. Weights run WSX_RSTAGES(t) steps ahead (3 where the
// ring fits, Q6_K's 112-byte slots 1). Grid as x128's, 512 threads, WSX_SMEM_BYTES(t).
#define WSX_SMEM_BYTES_RS(t, rs)                                                                           \
    (1024 + (WGX_K_MAX / WG_BK) * 2 * 128 * 128 + WS_ASTAGES * 2 * SWP_BN * 128 + 8 * 128 +                \
     (rs) * GEMM_THREADS * 2 * GEMM_SLOT_BYTES(t))
#define WSX_RSTAGES(t) (WSX_SMEM_BYTES_RS(t, 3) <= 232448 ? 3 : WSX_SMEM_BYTES_RS(t, 2) <= 232448 ? 2 : 1)
#define WSX_SMEM_BYTES(t) WSX_SMEM_BYTES_RS(t, WSX_RSTAGES(t))
template <int T>
__device__ __forceinline__ void gemm_wsx_body(const GemmArgs& a) {
    constexpr int BT = 128, BN = SWP_BN, BK = WG_BK, SW = Piece<T>::SLOT_WORDS, DT = GEMM_THREADS;
    constexpr int RS = WSX_RSTAGES(T), LEAD = RS;  // steps whose weights are copied ahead
    constexpr int XC = BT * 16 / DT, KT_MAX = WGX_K_MAX / BK;
    constexpr int XSTAGE = 2 * BT * 128, ASTAGE = 2 * BN * 128;
    constexpr int BAR_FULL = 1, BAR_EMPTY = 2;
    static_assert(BN == 128 && DT == 256, "eight decoder warps of 16 weight rows, two consumer warpgroups");
    static_assert(BK == 128 && SW * 4 == GEMM_SLOT_BYTES(T), "four pieces per row per step");
    static_assert(WS_ASTAGES == 1 && RS >= 1, "one A stage; a ring slot free when its step is copied");

    TALLY_DYNAMIC_SMEM(smem);
    u8* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);
    u8* Xs = base;                                          // [KT_MAX][2][BT][128 bytes]
    u8* As = Xs + KT_MAX * XSTAGE;                          // [2][BN][128 bytes]
    i32* s_xrow = reinterpret_cast<i32*>(As + ASTAGE);      // [BT]
    i32* s_yrow = s_xrow + BT;                              // [BT]
    u32* ring = reinterpret_cast<u32*>(s_yrow + BT);        // [RS][2][SW/4][256] x 16 B

    if (blockDim.x != WS_THREADS) return;
    if (a.xh == nullptr || (reinterpret_cast<u64>(a.xh) & 15u) != 0 || (a.ldxh & 7) != 0) return;
    if (a.K > WGX_K_MAX) return;
    int n0_first;
    const u8* w;
    if (!gemm_tile_begin<T, BK>(a, BN, BT, n0_first, w, s_xrow, s_yrow)) return;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int KT = a.K / BK;
    const int nblk = (a.N + BN - 1) / BN, bx = static_cast<int>(blockIdx.x), gx = static_cast<int>(gridDim.x);
    const int SS = ((nblk - bx + gx - 1) / gx) * KT;  // steps: weight blocks walked (>= 1) x K steps
    auto n0_of = [&](int s) { return (bx + (s / KT) * gx) * BN; };

    if (tid >= DT) {  // a decoder
        const int dtid = tid - DT, dw = dtid >> 5;
        auto slot = [&](int s, int j) {
            return Slot{ring + (s % RS) * (2 * SW * DT) + j * (SW * DT) + 4 * dtid, 4 * DT};
        };
        auto issue = [&](int s) {  // step s's weight copies, one group (empty past the last step)
            if (s < SS) {
                const u8 *r0, *r1;
                swap_rows(a, w, n0_of(s), dw, g, r0, r1);
                swap_issue<T>(slot(s, 0), slot(s, 1), r0, r1, 4 * (s % KT) + t, t);
            }
            cp_async_commit();
        };
        const int R0 = 16 * dw + g, R1 = R0 + 8;
        auto a_off = [&](int r, int kk, int e) {
            return (kk >> 2) * (BN * 128) + r * 128 + (((2 * (kk & 3) + e) ^ (r & 7)) << 4) + 4 * t;
        };
#pragma unroll
        for (int i = 0; i < LEAD; i++) issue(i);
        u32 h0[16], h1[16];
        for (int s = 0; s < SS; s++) {
            cp_async_wait<LEAD - 1>();  // step s's group (the later ones may still be in flight)
            const u8 *r0, *r1;
            swap_rows(a, w, n0_of(s), dw, g, r0, r1);
            swap_decode<T>(slot(s, 0), slot(s, 1), r0, r1, 4 * (s % KT) + t, t, h0, h1);
            if (s >= 1) named_bar_sync(BAR_EMPTY, WS_THREADS);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                *reinterpret_cast<u32*>(As + a_off(R0, kk, 0)) = h0[2 * kk];
                *reinterpret_cast<u32*>(As + a_off(R0, kk, 1)) = h0[2 * kk + 1];
                *reinterpret_cast<u32*>(As + a_off(R1, kk, 0)) = h1[2 * kk];
                *reinterpret_cast<u32*>(As + a_off(R1, kk, 1)) = h1[2 * kk + 1];
            }
            fence_proxy_async();  // the A stores, to the tensor cores
            named_bar_arrive(BAR_FULL, WS_THREADS);
            // Step s + LEAD's weights go to the ring slot just decoded (see gemm_ws_body).
            if constexpr (swap_shared<T>()) __syncwarp();
            issue(s + LEAD);
        }
        cp_async_wait<0>();
        return;
    }

    // A consumer: warp `warp` of warpgroup wgi, the accumulators of gemm_wgx_body's warp `warp`.
    const int warp = tid >> 5, wgi = warp >> 2;
#pragma unroll
    for (int i = 0; i < XC; i++) {  // x: every K step's stage, once
        const u16* src;
        u32 dst;
        wg_x_chunk<BT>(a, s_xrow, tid, i, src, dst);
        for (int kt = 0; kt < KT; kt++) cp_async16(Xs + kt * XSTAGE + dst, src + BK * kt);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();  // published to both warpgroups by FULL(0)'s phase
    float acc[BT / 2];
#pragma unroll
    for (int j = 0; j < BT / 2; j++) acc[j] = 0.0f;
    const u32 aa = smem_u32(As) + wgi * 64 * 128;
    for (int s = 0; s < SS; s++) {
        const int kt = s % KT;
        named_bar_sync(BAR_FULL, WS_THREADS);
        const u32 xa = smem_u32(Xs + kt * XSTAGE);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            WgmmaSS<128>::mma(acc, wg_desc(aa + (kk >> 2) * (BN * 128) + 32 * (kk & 3)),
                              wg_desc(xa + (kk >> 2) * (BT * 128) + 32 * (kk & 3)), kk == 0 && kt == 0 ? 0 : 1);
        wg_commit();
        wg_wait<0>();  // step s's MMAs done: the A stage is free
        if (s + 1 < SS) named_bar_arrive(BAR_EMPTY, WS_THREADS);
        if (kt == KT - 1) wg_store<BT>(a, s_yrow, n0_of(s) + 16 * warp + g, t, acc);
    }
}
