#pragma once
// The arguments of every attention kernel (attention.cu, attention_wg.cuh), mirrored by
// AttnArgs in crates/engine/src/cuda/args.rs (layout asserted at kernel build).
#include "common.cuh"

struct AttnArgs {
    const float* q;
    i64 ldq;  // [R, H*d]: query row r is at position q_offset + r
    const float* k;
    i64 ldk;  // [P, Hkv*d]: the cache, positions 0..P-1 (P >= q_offset + R)
    const float* v;
    i64 ldv;  // [P, Hkv*d]
    float* o;
    i64 ldo;  // [R, H*d]
    i32 R, P, H, Hkv, d, q_offset;
    float scale;
    i32 n_split;   // key-range splits (grid.z of flash_attn_*, grid.x of flash_decode_*); <= 1: write o
    i32 kv_chunk;  // keys per split, rounded up to 64 by the kernels
    i32 ldvt;      // halves a row of the transposed V copy (flash_attn_wg_d*; attn_kv_to_f16 writes V so when > 0); else 0
    float* ws;            // split partials, n_split * R * H * (d + 2) floats (n_split > 1)
    const i32* pos;       // the batch position (n_past), added to q_offset; null: 0
    __half* k16;          // f16 copies of k and v (flash_attn_h_*, attn_kv_to_f16; else unused)
    __half* v16;
    i64 ld16;
};

// One tile's online-softmax bookkeeping, shared by the prefill kernels (attention.cu,
// attention_wg.cuh), for the two rows a thread holds (a: g, b: g + 8 of its warp's 16): from
// this thread's maxima of the tile's scores mx_*, reduced over the quad of lanes that hold the
// row, it updates the running maxima m_* and gives the factors al_* that rescale the running
// sums and outputs and the biases nb_* with which ex2(s * cs + nb) is a score's weight. A row
// that has seen no key yet keeps max -inf: 0 is subtracted instead (exp2(-inf) = 0, never NaN).
// ex2: the caller's exp2 (the hardware's approximation on the GPU, the emulators' own).
template <class Ex2>
__device__ __forceinline__ void attn_softmax_step(float mx_a, float mx_b, float cs, Ex2 ex2, float& m_a, float& m_b,
                                                  float& al_a, float& al_b, float& nb_a, float& nb_b) {
    const float ninf = __uint_as_float(0xff800000u);
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    const float mu_a = mn_a == ninf ? 0.f : mn_a, mu_b = mn_b == ninf ? 0.f : mn_b;
    al_a = ex2((m_a - mu_a) * cs);
    al_b = ex2((m_b - mu_b) * cs);
    nb_a = -mu_a * cs;
    nb_b = -mu_b * cs;
    m_a = mn_a;
    m_b = mn_b;
}
