// RMS and L2 norms: Op::RmsNorm, Op::L2Norm; reference crates/engine/src/cpu/ops/norm.rs.
#include "common.cuh"

// RMS / L2 norm over groups of `group` columns. One block per (row, group).
// rms: y = x * rsqrt(mean(x^2) + eps) * w[0..group]
// l2:  y = x * rsqrt(sum(x^2) + eps) * scale
// Fused forms (ops/fused.rs; both off when the fields are null): with `gate`, the MulSilu that
// follows the norm, y = (norm as above) * silu(gate), the same f32 operations as binary_map's
// (the norm's output is what it would have stored); with `x2`, a second norm of the same kind,
// group, eps and weight over another view (rows2 x cols2, its own scale2), in the blocks from
// blocks1 on. Each block runs the unfused launch's code on its own (row, group), so every output
// is that launch's bit for bit (when the block size is the same, which the host checks).
// With `yh`, the first norm's outputs are also stored as f16 (round to nearest, as
// cast_f16_rows rounds them) at yh + row * ldyh + column: the cast of the cuBLAS projections that
// read y next (ops/fused.rs, TALLY_NORM_CAST=on), so they need no cast launch of their own.
struct NormArgs {
    const float* x; i64 ldx;
    const float* w;            // null for the L2 norm
    float* y; i64 ldy;
    i32 rows, cols, group;
    float eps, scale;
    i32 l2;                    // 1: L2 norm, 0: RMS norm
    const float* gate; i64 ldgate;
    const float* x2; i64 ldx2;
    float* y2; i64 ldy2;
    i32 rows2, cols2;
    float scale2;
    i32 blocks1;
    i32 no_regs;               // 1: norm_rows_w's loop form where its register form would run
    u16* yh; i64 ldyh;         // null: no f16 copy
};

// One (row, group) of a norm_rows launch: block index blk's views (the second norm's from
// blocks1 on). ok is false past the last (row, group) of its view.
struct NormJob {
    const float* x;
    float* y;
    u16* yh;  // the f16 copy (the first norm only), or null
    const float* z;
    const float* w;
    float scale;
    bool ok;
};

__device__ __forceinline__ NormJob norm_job(const NormArgs& a, int blk) {
    const int blk0 = blk;
    const float* X = a.x;
    float* Y = a.y;
    i64 ldx = a.ldx, ldy = a.ldy;
    int rows = a.rows, cols = a.cols;
    float scale = a.scale;
    if (a.x2 && blk >= a.blocks1) {
        blk -= a.blocks1;
        X = a.x2;
        Y = a.y2;
        ldx = a.ldx2;
        ldy = a.ldy2;
        rows = a.rows2;
        cols = a.cols2;
        scale = a.scale2;
    }
    const int groups = cols / a.group;
    const int row = blk / groups;
    const int g = blk % groups;
    NormJob j;
    j.ok = row < rows;
    j.x = X + (i64)row * ldx + (i64)g * a.group;
    j.y = Y + (i64)row * ldy + (i64)g * a.group;
    j.yh = a.yh && !(a.x2 && blk0 >= a.blocks1) ? a.yh + (i64)row * a.ldyh + (i64)g * a.group : nullptr;
    j.z = a.gate ? a.gate + (i64)row * a.ldgate + (i64)g * a.group : nullptr;
    j.w = a.w;
    j.scale = scale;
    return j;
}

// Output i of a job: y, and (YH: the _h kernels, which the host takes when it sets yh) its f16
// copy. Separate kernels, so the plain ones' code is the one before the copy existed.
template <bool YH>
__device__ __forceinline__ void norm_store(const NormJob& j, int i, float v) {
    j.y[i] = v;
    if constexpr (YH) {
        if (j.yh) j.yh[i] = __half_as_ushort(__float2half_rn(v));
    }
}

template <bool YH>
__device__ __forceinline__ void norm_rows_body(const NormArgs& a) {
    __shared__ float red[32];
    const NormJob j = norm_job(a, static_cast<int>(blockIdx.x));
    if (!j.ok) return;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = j.x[i];
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float denom = a.l2 ? ss : ss / (float)a.group;
    const float s = rsqrtf(denom + a.eps) * (a.l2 ? j.scale : 1.0f);
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = j.x[i] * s;
        const float n = j.w ? v * j.w[i] : v;
        norm_store<YH>(j, i, j.z ? n * tally_silu(j.z[i]) : n);
    }
}
extern "C" __global__ void norm_rows(NormArgs a) {
    pdl_enter();
    norm_rows_body<false>(a);
}
extern "C" __global__ void norm_rows_h(NormArgs a) {
    pdl_enter();
    norm_rows_body<true>(a);
}

// norm_rows_w's scale from the four running sums a lane kept for the block threads it plays:
// each reduced over the warp as that warp would, then the four as block_sum's second stage.
__device__ __forceinline__ float norm_w_scale(const NormArgs& a, const NormJob& j, float (&ss)[4], int lane) {
#pragma unroll
    for (int w = 0; w < 4; w++) ss[w] = warp_sum(ss[w]);
    float t = lane == 0 ? ss[0] : lane == 1 ? ss[1] : lane == 2 ? ss[2] : lane == 3 ? ss[3] : 0.0f;
    t = warp_sum(t);
    const float denom = a.l2 ? t : t / (float)a.group;
    return rsqrtf(denom + a.eps) * (a.l2 ? j.scale : 1.0f);
}

template <int R, bool YH>
__device__ __forceinline__ void norm_w_regs(const NormArgs& a, const NormJob& j, int lane) {
    // Element i = 32 w + lane + 128 r: thread 32 w + lane's r-th element at 128 threads.
    float xv[4][R], zv[4][R], wv[4][R];
#pragma unroll
    for (int w = 0; w < 4; w++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = 32 * w + lane + 128 * r;
            const bool on = i < a.group;
            xv[w][r] = on ? j.x[i] : 0.0f;
            zv[w][r] = on && j.z ? j.z[i] : 0.0f;
            wv[w][r] = on && j.w ? j.w[i] : 0.0f;
        }
    float ss[4];
#pragma unroll
    for (int w = 0; w < 4; w++) {
        ss[w] = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (32 * w + lane + 128 * r < a.group) ss[w] += xv[w][r] * xv[w][r];
    }
    const float s = norm_w_scale(a, j, ss, lane);
#pragma unroll
    for (int w = 0; w < 4; w++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = 32 * w + lane + 128 * r;
            if (i >= a.group) continue;
            const float v = xv[w][r] * s;
            const float n = j.w ? v * wv[w][r] : v;
            norm_store<YH>(j, i, j.z ? n * tally_silu(zv[w][r]) : n);
        }
}

// norm_rows at its 128-thread block size, one warp per (row, group): many short groups (prefill's
// per-head q/k L2 norms and gated norms: 8,192 tokens x 32 heads of 128) made that many tiny
// blocks, each mostly launch and barriers. Lane l plays the block's threads l, l + 32, l + 64 and
// l + 96 (warp w's lane l): it keeps each one's running sum apart, reduces each over the warp as
// that warp would (warp_sum), then the four as block_sum's second stage does (lanes 0..3 hold the
// warp sums, the rest 0), so every output is norm_rows' bit for bit at 128 threads.
// Groups of at most 128 R columns (R = 1, 2: the model's 128 and 256) take the register form:
// every input of the lane (x, the gate, the weight) is loaded before the reduction and x is not
// read again, so a warp pays one round of loads instead of two (x, then x again with the gate and
// weight after the sums); the same operations in the same order.
// Grid: ceil(blocks / NORM_W_GROUPS) blocks of 32 NORM_W_GROUPS threads.
template <bool YH>
__device__ __forceinline__ void norm_rows_w_body(const NormArgs& a) {
    const int lane = threadIdx.x & 31;
    const int blk = static_cast<int>(blockIdx.x) * NORM_W_GROUPS + (threadIdx.x >> 5);
    const NormJob j = norm_job(a, blk);
    if (!j.ok) return;
    if (a.group <= 128 && !a.no_regs) {
        norm_w_regs<1, YH>(a, j, lane);
        return;
    }
    if (a.group <= 256 && !a.no_regs) {
        norm_w_regs<2, YH>(a, j, lane);
        return;
    }
    float ss[4];
#pragma unroll
    for (int w = 0; w < 4; w++) {
        ss[w] = 0.0f;
        for (int i = 32 * w + lane; i < a.group; i += 128) {
            const float v = j.x[i];
            ss[w] += v * v;
        }
    }
    const float s = norm_w_scale(a, j, ss, lane);
    for (int i = lane; i < a.group; i += 32) {
        const float v = j.x[i] * s;
        const float n = j.w ? v * j.w[i] : v;
        norm_store<YH>(j, i, j.z ? n * tally_silu(j.z[i]) : n);
    }
}
extern "C" __global__ void __launch_bounds__(32 * NORM_W_GROUPS) norm_rows_w(NormArgs a) {
    pdl_enter();
    norm_rows_w_body<false>(a);
}
extern "C" __global__ void __launch_bounds__(32 * NORM_W_GROUPS) norm_rows_w_h(NormArgs a) {
    pdl_enter();
    norm_rows_w_body<true>(a);
}

// A residual add and the RMS norm of its sum (Op::Add then Op::RmsNorm over whole rows), in one
// launch: sum = a + b is written (the residual stream, read later), and y = rms_norm(sum) * w.
// With c set, two adds first (the FFN's output then the residual): mid = a + b, sum = mid + c
// (IEEE addition is commutative, so the operand order of the second add does not matter).
// One block per row with the block size norm_rows gets for the same rows and width, each thread
// the same elements in the same order, so every output equals the unfused launches' bit for
// bit (ops/fused.rs relies on it).
// With gx set, the shared-expert gate before the adds as well (Op::SharedGate: gb = b *
// sigmoid(gx . gw), written to gb and used as the first add's b), with the shared_gate kernel's
// loop and reduction at the same block size, so gb is its output bit for bit.
// With ey set, the routed experts' combine before all of it (Op::MoeCombine: a = sum over j < ek
// of ew[j] * ey[row * ek + j], written to a, in moe_combine's order and expression, so a is its
// output bit for bit; the routed and shared outputs are then a and b as before).
// The intermediate outputs no later node reads (the combine's a, the gated b, mid) may be left
// unstored: mid and gb null, skip_a set (the register form; the loop form reads a back, so it
// stores a whatever skip_a says). The sum and y are always stored.
struct AddNormArgs {
    const float* a; i64 lda;
    const float* b; i64 ldb;
    const float* c; i64 ldc;  // null: one add
    float* mid; i64 ldm;      // a + b when c is set (null: not stored)
    float* sum; i64 lds;
    const float* w;
    float* y; i64 ldy;
    i32 rows, cols;
    float eps;
    i32 skip_a;                 // 1: the combine's output a is not stored (register form only)
    const float* gx; i64 ldgx;  // null: no gate
    const float* gw;
    float* gb; i64 ldgb;        // null with gx set: the gated b is not stored
    const float* ey; i64 ldey;  // null: no combine (a is read)
    const float* ew; i64 ldew;
    i32 ek;
    i32 no_regs;                // 1: the loop form even where the register form would run
    u16* yh; i64 ldyh;          // null: no f16 copy of y (else norm.cu's NormArgs::yh)
};

// add_rms_norm for rows of at most NE elements a thread (decode: 2048 columns over 1,024
// threads, NE = 4 in add_rms_norm; prefill: over 256, NE = 8 in add_rms_norm_256): every input is loaded at the start, before any output is written, and the
// values the loop form reads back (the combine's a, the sum) stay in registers, so the launch
// pays one round of global loads instead of four. The same operations in the same order as the
// loop form below (thread t's elements t, t + blockDim, ... ascending; the same block_sum
// calls), so every output is its bit for bit. Reading every input first is safe where the loop
// form is: the only values read across elements (gx, gw, ew) are never outputs of this launch
// (each buffer it writes is read at most at the writing thread's own elements).
// EARLY picks the load phase: every load first (the default), or (false) the form before stop
// 44; which kernel takes which: ADD_NORM_EARLY_1024 / _256 below.
template <int NE, bool EARLY, bool YH = false>
__device__ __forceinline__ void add_rms_norm_regs(const AddNormArgs& p, int row, float* red) {
    const int nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
    const float* a = p.a + (i64)row * p.lda;
    const float* b = p.b + (i64)row * p.ldb;
    const float* c = p.c ? p.c + (i64)row * p.ldc : nullptr;
    const float* gx = p.gx ? p.gx + (i64)row * p.ldgx : nullptr;
    const float* ew = p.ey ? p.ew + (i64)row * p.ldew : nullptr;
    float av[NE], bv[NE], cv[NE], wv[NE], gxv[NE], gwv[NE];
    float ewv[8];
#pragma unroll
    for (int j = 0; j < 8; j++) ewv[j] = ew && j < p.ek ? ew[j] : 0.0f;
    if constexpr (!EARLY) {
    // The form before stop 44 (TALLY_ADD_NORM_LOADS=late): loads and the combine's sums
    // interleaved element by element, so the compiler waits for each element's eight expert
    // rows before loading the next element's (eight dependent rounds of loads a thread).
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int i = tid + k * nt;
        av[k] = bv[k] = cv[k] = wv[k] = gxv[k] = gwv[k] = 0.0f;
        if (i >= p.cols) continue;
        bv[k] = b[i];
        if (c) cv[k] = c[i];
        wv[k] = p.w[i];
        if (gx) {
            gxv[k] = gx[i];
            gwv[k] = p.gw[i];
        }
        if (p.ey) {  // moe_combine's expression for element i
            float sm = 0.0f;
            const float* ey = p.ey + (i64)row * p.ek * p.ldey + i;
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (j < p.ek) sm += ewv[j] * ey[(i64)j * p.ldey];
            av[k] = sm;
        } else {
            av[k] = a[i];
        }
    }
    } else {
    // Every load first, in branch-free (predicated) form, and no use before the last of them
    // (stop 44: interleaved, the prefill launch with the combine read at 1.8x its byte floor,
    // 462 us at 8,192 tokens on an H100).
    bool on[NE];
#pragma unroll
    for (int k = 0; k < NE; k++) on[k] = tid + k * nt < p.cols;
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int i = tid + k * nt;
        bv[k] = on[k] ? b[i] : 0.0f;
        cv[k] = c && on[k] ? c[i] : 0.0f;
        wv[k] = on[k] ? p.w[i] : 0.0f;
        gxv[k] = gx && on[k] ? gx[i] : 0.0f;
        gwv[k] = gx && on[k] ? p.gw[i] : 0.0f;
        av[k] = !p.ey && on[k] ? a[i] : 0.0f;
    }
    if (p.ey) {  // moe_combine's expression for element i, its loads all issued first
        const float* ey = p.ey + (i64)row * p.ek * p.ldey;
        float eyv[NE][8];
#pragma unroll
        for (int k = 0; k < NE; k++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                eyv[k][j] = on[k] && j < p.ek ? ey[(i64)j * p.ldey + tid + k * nt] : 0.0f;
#pragma unroll
        for (int k = 0; k < NE; k++) {
            float sm = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (j < p.ek) sm += ewv[j] * eyv[k][j];
            av[k] = on[k] ? sm : 0.0f;
        }
    }
    }
    if (p.ey && !p.skip_a) {
        float* ao = const_cast<float*>(a);
#pragma unroll
        for (int k = 0; k < NE; k++)
            if (tid + k * nt < p.cols) ao[tid + k * nt] = av[k];
    }
    float gate = 1.0f;
    float* gb = nullptr;
    if (gx) {
        float d = 0.0f;
#pragma unroll
        for (int k = 0; k < NE; k++)
            if (tid + k * nt < p.cols) d += gxv[k] * gwv[k];
        d = block_sum(d, red);
        gate = tally_sigmoid(d);
        gb = p.gb ? p.gb + (i64)row * p.ldgb : nullptr;
    }
    float* m = p.mid ? p.mid + (i64)row * p.ldm : nullptr;
    float* s = p.sum + (i64)row * p.lds;
    float* y = p.y + (i64)row * p.ldy;
    u16* yh = YH && p.yh ? p.yh + (i64)row * p.ldyh : nullptr;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int i = tid + k * nt;
        if (i >= p.cols) continue;
        float bk = bv[k];
        if (gx) {
            bk = bk * gate;
            if (gb) gb[i] = bk;
        }
        float v = av[k] + bk;
        if (c) {
            if (m) m[i] = v;
            v = v + cv[k];
        }
        s[i] = v;
        av[k] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float sc = rsqrtf(ss / (float)p.cols + p.eps) * 1.0f;
#pragma unroll
    for (int k = 0; k < NE; k++) {
        const int i = tid + k * nt;
        if (i >= p.cols) continue;
        const float v = av[k] * sc, o = v * wv[k];
        y[i] = o;
        if constexpr (YH) {
            if (yh) yh[i] = __half_as_ushort(__float2half_rn(o));
        }
    }
}

template <bool YH = false>
__device__ __forceinline__ void add_rms_norm_loop(const AddNormArgs& p, int row, float* red);

// The load phase of each kernel's register form (TALLY_ADD_NORM_LOADS): early in both kernels
// (default; at decode with two values a thread, which fits the 1,024-thread kernel's 64
// registers: tg128 +2.6-2.9% on an H100, stop 44), early in the 256-thread prefill kernel only
// (-DTALLY_ADD_NORM_PREFILL_EARLY), or late in both (-DTALLY_ADD_NORM_LATE: before stop 44).
#if defined(TALLY_ADD_NORM_LATE)
#define ADD_NORM_EARLY_1024 false
#define ADD_NORM_EARLY_256 false
#elif defined(TALLY_ADD_NORM_PREFILL_EARLY)
#define ADD_NORM_EARLY_1024 false
#define ADD_NORM_EARLY_256 true
#else
#define ADD_NORM_EARLY_1024 true
#define ADD_NORM_EARLY_256 true
#endif

extern "C" __global__ void __launch_bounds__(1024) add_rms_norm(AddNormArgs p) {
    pdl_enter();
    __shared__ float red[32];
    const int row = blockIdx.x;
    if (row >= p.rows) return;
    // Two values a thread cover the model's rows (2048 columns at 1,024 threads) in half the
    // registers of four, where the early loads fit the 64 a thread without spilling; wider rows
    // (up to 4 values a thread) keep the interleaved form, which fits.
    const int nt = static_cast<int>(blockDim.x);
    if (p.cols <= 2 * nt && p.ek <= 8 && !p.no_regs) add_rms_norm_regs<2, ADD_NORM_EARLY_1024>(p, row, red);
    else if (p.cols <= 4 * nt && p.ek <= 8 && !p.no_regs) add_rms_norm_regs<4, false>(p, row, red);
    else add_rms_norm_loop(p, row, red);
}

// The same at most 256 threads a block (prefill's rows: 2048 columns over 256 threads), at
// least ADD_NORM_256_MIN_BLOCKS blocks a multiprocessor (TALLY_ADD_NORM_BLOCKS; default 2: the
// early loads at 128 registers, two rows a multiprocessor, where the 184 registers ptxas takes
// unbounded fit one; pp8192 +3% on an H100, stop 44).
#ifndef ADD_NORM_256_MIN_BLOCKS
#define ADD_NORM_256_MIN_BLOCKS 2
#endif
template <bool YH>
__device__ __forceinline__ void add_rms_norm_256_body(const AddNormArgs& p) {
    __shared__ float red[32];
    const int row = blockIdx.x;
    if (row >= p.rows) return;
    if (p.cols <= 8 * static_cast<int>(blockDim.x) && p.ek <= 8 && !p.no_regs) add_rms_norm_regs<8, ADD_NORM_EARLY_256, YH>(p, row, red);
    else add_rms_norm_loop<YH>(p, row, red);
}
extern "C" __global__ void __launch_bounds__(256, ADD_NORM_256_MIN_BLOCKS) add_rms_norm_256(AddNormArgs p) {
    pdl_enter();
    add_rms_norm_256_body<false>(p);
}
// With the f16 copy of y (yh; TALLY_NORM_CAST=on): its own kernel, so add_rms_norm_256's code is
// the one before the copy existed (the copy's pointer and stores took registers it spilled).
extern "C" __global__ void __launch_bounds__(256, ADD_NORM_256_MIN_BLOCKS) add_rms_norm_256_h(AddNormArgs p) {
    pdl_enter();
    add_rms_norm_256_body<true>(p);
}

// The loop form: each phase reads its inputs from global memory (the combine's a and the sum
// read back after they are written).
template <bool YH>
__device__ __forceinline__ void add_rms_norm_loop(const AddNormArgs& p, int row, float* red) {
    const float* a = p.a + (i64)row * p.lda;
    if (p.ey) {  // moe_combine's loop for this row's elements; a is its output, read back below
        float* ao = const_cast<float*>(a);
        const float* ew = p.ew + (i64)row * p.ldew;
        for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
            float s = 0.0f;
            for (int j = 0; j < p.ek; j++) s += ew[j] * p.ey[((i64)row * p.ek + j) * p.ldey + i];
            ao[i] = s;
        }
    }
    const float* b = p.b + (i64)row * p.ldb;
    const float* c = p.c ? p.c + (i64)row * p.ldc : nullptr;
    float* m = p.mid ? p.mid + (i64)row * p.ldm : nullptr;
    float* s = p.sum + (i64)row * p.lds;
    float* y = p.y + (i64)row * p.ldy;
    float gate = 1.0f;
    float* gb = nullptr;
    if (p.gx) {
        const float* gx = p.gx + (i64)row * p.ldgx;
        float d = 0.0f;
        for (int i = threadIdx.x; i < p.cols; i += blockDim.x) d += gx[i] * p.gw[i];
        d = block_sum(d, red);
        gate = tally_sigmoid(d);
        gb = p.gb ? p.gb + (i64)row * p.ldgb : nullptr;
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
        float bv = b[i];
        if (p.gx) {
            bv = bv * gate;
            if (gb) gb[i] = bv;
        }
        float v = a[i] + bv;
        if (c) {
            if (m) m[i] = v;
            v = v + c[i];
        }
        s[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float sc = rsqrtf(ss / (float)p.cols + p.eps) * 1.0f;
    u16* yh = YH && p.yh ? p.yh + (i64)row * p.ldyh : nullptr;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
        const float v = s[i] * sc, o = v * p.w[i];
        y[i] = o;
        if constexpr (YH) {
            if (yh) yh[i] = __half_as_ushort(__float2half_rn(o));
        }
    }
}
