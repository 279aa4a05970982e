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
