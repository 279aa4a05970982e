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
    i32 ldvt;      // halves a row of the transposed V copy (flash_attn_wg_d*, attn_kv_to_f16_t); else 0
    float* ws;            // split partials, n_split * R * H * (d + 2) floats (n_split > 1)
    const i32* pos;       // the batch position (n_past), added to q_offset; null: 0
    __half* k16;          // f16 copies of k and v (flash_attn_h_*, attn_kv_to_f16; else unused)
    __half* v16;
    i64 ld16;
};
