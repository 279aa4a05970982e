// The operands of the library GEMM path (included by gemm.cu, so they are in its module).
#pragma once
#include "quant.cuh"

// ---------------------------------------------------------------------------------------------
// Operands for a library GEMM (cuBLAS, f16 in, f32 accumulate and out), the opt-in dense path
// of large-M projections (TALLY_GEMM=cublas): each weight element is dequantised once per
// projection instead of once per M tile, and the product runs on the library's tuned kernels.
//
//   dequant_f16:   weight rows -> f16 [N, K], row n stored at gemm_out_col(n) (so layout 1's
//                  q/gate split comes out of the GEMM with no extra pass); values are the exact
//                  f32 dequantisation (dequant8) rounded to nearest f16.
//   cast_f16_rows: f32 activations [M, ldx] -> f16 [M, K], round to nearest.
// Grids (ceil(K / 2048), rows), 256 threads, 8 elements per thread. K % 8 == 0 and K a multiple
// of the weight's block; `out` 16-byte aligned. A violated precondition writes nothing.

struct DequantF16Args {
    const u8* w;
    i64 row_bytes;
    i32 type;
    i32 K;
    i32 N;
    u32* out;  // [N, K / 2] f16 pairs
    i32 layout;
    i32 head_dim;
    i32 n_head;
};

extern "C" __global__ void __launch_bounds__(256) dequant_f16(DequantF16Args a) {
    pdl_enter();
    const int n = blockIdx.y;
    const int k = (blockIdx.x * 256 + threadIdx.x) * 8;
    if (n >= a.N || !dequant8_in_row(a.type, a.K, k)) return;
    const bool split = a.layout == 1;
    if (split && (a.head_dim <= 0 || a.n_head <= 0 || a.N != 2 * a.n_head * a.head_dim)) return;
    float v[8];
    if (!dequant8_any(a.type, a.w + static_cast<i64>(n) * a.row_bytes, k, v)) return;
    u32* o = a.out + static_cast<i64>(gemm_out_col(n, split, a.head_dim, a.n_head)) * (a.K / 2);
    *reinterpret_cast<uint4*>(o + k / 2) =
        make_uint4(pack_f16x2(v[0], v[1]), pack_f16x2(v[2], v[3]), pack_f16x2(v[4], v[5]), pack_f16x2(v[6], v[7]));
}

struct CastF16Args {
    const float* x;
    i64 ldx;
    i32 M;
    i32 K;
    u32* out;  // [M, K / 2] f16 pairs
};

extern "C" __global__ void __launch_bounds__(256) cast_f16_rows(CastF16Args a) {
    pdl_enter();
    const int m = blockIdx.y;
    const int k = (blockIdx.x * 256 + threadIdx.x) * 8;
    if (m >= a.M || k >= a.K || a.K % 8 != 0) return;
    const float* x = a.x + static_cast<i64>(m) * a.ldx + k;
    *reinterpret_cast<uint4*>(a.out + static_cast<i64>(m) * (a.K / 2) + k / 2) =
        make_uint4(pack_f16x2(x[0], x[1]), pack_f16x2(x[2], x[3]), pack_f16x2(x[4], x[5]), pack_f16x2(x[6], x[7]));
}
