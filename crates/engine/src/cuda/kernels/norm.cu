// RMS and L2 norms: Op::RmsNorm, Op::L2Norm; reference crates/engine/src/cpu/ops/norm.rs.
#include "common.cuh"

// RMS / L2 norm over groups of `group` columns. One block per (row, group).
// rms: y = x * rsqrt(mean(x^2) + eps) * w[0..group]
// l2:  y = x * rsqrt(sum(x^2) + eps) * scale
struct NormArgs {
    const float* x; i64 ldx;
    const float* w;            // null for the L2 norm
    float* y; i64 ldy;
    i32 rows, cols, group;
    float eps, scale;
    i32 l2;                    // 1: L2 norm, 0: RMS norm
};

extern "C" __global__ void norm_rows(NormArgs a) {
    pdl_enter();
    __shared__ float red[32];
    const int groups = a.cols / a.group;
    const int row = blockIdx.x / groups;
    const int g = blockIdx.x % groups;
    if (row >= a.rows) return;
    const float* x = a.x + (i64)row * a.ldx + (i64)g * a.group;
    float* y = a.y + (i64)row * a.ldy + (i64)g * a.group;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = x[i];
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float denom = a.l2 ? ss : ss / (float)a.group;
    const float s = rsqrtf(denom + a.eps) * (a.l2 ? a.scale : 1.0f);
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = x[i] * s;
        y[i] = a.w ? v * a.w[i] : v;
    }
}

// A residual add and the RMS norm of its sum (Op::Add then Op::RmsNorm over whole rows), in one
// launch: sum = a + b is written (the residual stream, read later), and y = rms_norm(sum) * w.
// With c set, two adds first (the FFN's output then the residual): mid = a + b, sum = mid + c
// (IEEE addition is commutative, so the operand order of the second add does not matter).
// One block per row with the block size norm_rows gets for the same rows and width, each thread
// the same elements in the same order, so every output equals the unfused launches' bit for
// bit (ops/fused.rs relies on it).
struct AddNormArgs {
    const float* a; i64 lda;
    const float* b; i64 ldb;
    const float* c; i64 ldc;  // null: one add
    float* mid; i64 ldm;      // a + b when c is set
    float* sum; i64 lds;
    const float* w;
    float* y; i64 ldy;
    i32 rows, cols;
    float eps;
    i32 pad0;
};

extern "C" __global__ void add_rms_norm(AddNormArgs p) {
    pdl_enter();
    __shared__ float red[32];
    const int row = blockIdx.x;
    if (row >= p.rows) return;
    const float* a = p.a + (i64)row * p.lda;
    const float* b = p.b + (i64)row * p.ldb;
    const float* c = p.c ? p.c + (i64)row * p.ldc : nullptr;
    float* m = p.mid ? p.mid + (i64)row * p.ldm : nullptr;
    float* s = p.sum + (i64)row * p.lds;
    float* y = p.y + (i64)row * p.ldy;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
        float v = a[i] + b[i];
        if (c) {
            m[i] = v;
            v = v + c[i];
        }
        s[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float sc = rsqrtf(ss / (float)p.cols + p.eps) * 1.0f;
    for (int i = threadIdx.x; i < p.cols; i += blockDim.x) {
        const float v = s[i] * sc;
        y[i] = v * p.w[i];
    }
}
