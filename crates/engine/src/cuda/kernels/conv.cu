// Causal depthwise conv + SiLU of the delta-rule layers: Op::ConvSilu; reference
// crates/engine/src/cpu/ops/conv.rs. The variant fused with the per-head L2 norm of q and k
// (conv_silu_l2norm, the `L2` instantiation of conv_body) is lab/delta/variants.cu's: the engine
// does not load it.
//
// conv_silu: grid (ceil(C / (4 * CONV_THREADS)), ceil(T / CONV_ROWS)), CONV_THREADS threads, no
//   dynamic smem. A thread owns 4 consecutive channels of CONV_ROWS consecutive tokens (16-byte
//   accesses, coalesced across the warp), sliding a K-1 row window in registers. Only the blocks
//   of the first token tile (blockIdx.y == 0) read the carried state, and the same thread that
//   read a channel's state writes that channel's new state afterwards: no other block touches the
//   state, so in-place state update is race-free. y must not overlap x or the state. T = 0:
//   launch nothing. CONV_ROWS and CONV_THREADS come from the host (cuda/consts.rs).
#include "common.cuh"

struct ConvSiluArgs {
    const float* x; i64 ldx;  // [T, C]
    float* state; i64 lds;    // [K-1, C] carried rows (oldest first), read then overwritten
    const float* w;           // [C, K] f32: row c holds channel c's taps; tap j multiplies xe[t+j]
    float* y; i64 ldy;        // [T, C]
    i32 T, C, K;              // 1 <= K <= 4 (other K: the kernels write nothing)
    i32 pad0;
    // Per-token states (off when null): the state after token t, t < T, at snap + t * snap_ld
    // in the state's layout (rows of lds; a speculative verification's rollback points).
    float* snap; i64 snap_ld;
};




__device__ __forceinline__ bool conv_aligned16(const void* p, i64 ld) {
    return ((((unsigned long long)p) & 15ull) == 0) && ((ld & 3) == 0);
}

__device__ __forceinline__ float4 conv_ld4(const float* p, i64 ld, i64 r, int c, int C, bool vec) {
    const float* s = p + r * ld + c;
    if (vec) return *reinterpret_cast<const float4*>(s);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < C) v.x = s[0];
    if (c + 1 < C) v.y = s[1];
    if (c + 2 < C) v.z = s[2];
    if (c + 3 < C) v.w = s[3];
    return v;
}

__device__ __forceinline__ void conv_st4(float* p, i64 ld, i64 r, int c, int C, bool vec, float4 v) {
    float* s = p + r * ld + c;
    if (vec) {
        *reinterpret_cast<float4*>(s) = v;
        return;
    }
    if (c < C) s[0] = v.x;
    if (c + 1 < C) s[1] = v.y;
    if (c + 2 < C) s[2] = v.z;
    if (c + 3 < C) s[3] = v.w;
}

__device__ __forceinline__ float conv_silu_f(float x) { return x / (1.0f + expf(-x)); }

struct ConvNorm {
    i32 norm_cols, group, scale_cols;
    float eps, scale;
};

template <int K, bool L2>
__device__ __forceinline__ void conv_body(const ConvSiluArgs& a, const ConvNorm n) {
    const int T = a.T, C = a.C;
    const int c = blockIdx.x * (4 * CONV_THREADS) + 4 * threadIdx.x;
    const int t0 = blockIdx.y * CONV_ROWS;
    const bool active = c < C;
    const bool vec = (C & 3) == 0 && conv_aligned16(a.x, a.ldx) && conv_aligned16(a.y, a.ldy) &&
                     conv_aligned16(a.state, a.lds);
    const bool vr = active && vec;  // vector path for this thread (C%4 == 0 means c+3 < C)

    float wt[4][K];
#pragma unroll
    for (int ch = 0; ch < 4; ++ch)
#pragma unroll
        for (int j = 0; j < K; ++j) wt[ch][j] = (c + ch < C) ? a.w[(i64)(c + ch) * K + j] : 0.0f;

    // win[j] = X(t - (K-1) + j) for the next output row t, X(u) = u >= 0 ? x[u] : state[K-1+u].
    float4 win[K > 1 ? K - 1 : 1];
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
        const int u = t0 - (K - 1) + j;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active) {
            if (u >= 0) v = conv_ld4(a.x, a.ldx, u, c, C, vr);
            else v = conv_ld4(a.state, a.lds, K - 1 + u, c, C, vr);
        }
        win[j] = v;
    }

    // New state = last K-1 rows of [state; x]: row i = xe[T+i] = T+i < K-1 ? state[T+i] : x[T+i-(K-1)].
    // Written by the first token tile's block, by the thread that just read these channels' old
    // state into win (win[j] = state[j] there), so no other thread or block reads it afterwards.
    if (blockIdx.y == 0 && active) {
#pragma unroll
        for (int i = 0; i < K - 1; ++i) {
            const int u = T + i - (K - 1);
            float4 v = win[0];
            if (u >= 0) v = conv_ld4(a.x, a.ldx, u, c, C, vr);
#pragma unroll
            for (int j = 1; j < K - 1; ++j)
                if (u < 0 && j == T + i) v = win[j];
            conv_st4(a.state, a.lds, i, c, C, vr, v);
        }
        // The state after token t: rows xe[t + 1 + i], i < K - 1 (win still holds the old state).
        if (a.snap) {
            for (int t = 0; t < T; ++t) {
#pragma unroll
                for (int i = 0; i < K - 1; ++i) {
                    const int e = t + 1 + i, u = e - (K - 1);
                    float4 v = win[0];
                    if (u >= 0) v = conv_ld4(a.x, a.ldx, u, c, C, vr);
#pragma unroll
                    for (int j = 1; j < K - 1; ++j)
                        if (u < 0 && j == e) v = win[j];
                    conv_st4(a.snap + (i64)t * a.snap_ld, a.lds, i, c, C, vr, v);
                }
            }
        }
    }

    // Rows in groups of 8: the 8 loads are issued before any store (y and x may alias as far
    // as the compiler knows, so it would not hoist them itself).
    const int rows = min(CONV_ROWS, T - t0);
    for (int r0 = 0; r0 < rows; r0 += 8) {
        float4 cur[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            cur[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (active && r0 + u < rows) cur[u] = conv_ld4(a.x, a.ldx, t0 + r0 + u, c, C, vr);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (r0 + u < rows) {  // block-uniform
            // Taps in the CPU reference's order: xe[t], ..., xe[t+K-1] (= the current row).
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int j = 0; j < K - 1; ++j) {
                s.x = fmaf(wt[0][j], win[j].x, s.x);
                s.y = fmaf(wt[1][j], win[j].y, s.y);
                s.z = fmaf(wt[2][j], win[j].z, s.z);
                s.w = fmaf(wt[3][j], win[j].w, s.w);
            }
            s.x = fmaf(wt[0][K - 1], cur[u].x, s.x);
            s.y = fmaf(wt[1][K - 1], cur[u].y, s.y);
            s.z = fmaf(wt[2][K - 1], cur[u].z, s.z);
            s.w = fmaf(wt[3][K - 1], cur[u].w, s.w);
#pragma unroll
            for (int j = 0; j + 1 < K - 1; ++j) win[j] = win[j + 1];
            if (K > 1) win[K > 1 ? K - 2 : 0] = cur[u];
            float4 o = make_float4(conv_silu_f(s.x), conv_silu_f(s.y), conv_silu_f(s.z), conv_silu_f(s.w));
            if (L2) {
                // Sum of squares over the group's group/4 lanes (groups never straddle a warp:
                // a warp covers 128 channels at a multiple of 128, and group divides 128).
                float ss = o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w;
                for (int off = n.group / 8; off >= 1; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                if (c < n.norm_cols) {
                    float f = 1.0f / sqrtf(ss + n.eps);
                    if (c < n.scale_cols) f *= n.scale;
                    o.x *= f;
                    o.y *= f;
                    o.z *= f;
                    o.w *= f;
                }
            }
            if (active) conv_st4(a.y, a.ldy, t0 + r0 + u, c, C, vr, o);
            }
        }
    }

}

template <bool L2>
__device__ __forceinline__ void conv_dispatch(const ConvSiluArgs& a, const ConvNorm n) {
    switch (a.K) {
        case 1: conv_body<1, L2>(a, n); break;
        case 2: conv_body<2, L2>(a, n); break;
        case 3: conv_body<3, L2>(a, n); break;
        case 4: conv_body<4, L2>(a, n); break;
        default: break;
    }
}

extern "C" __global__ void __launch_bounds__(CONV_THREADS) conv_silu(ConvSiluArgs a) {
    pdl_enter();
    conv_dispatch<false>(a, ConvNorm{0, 4, 0, 0.0f, 1.0f});
}
