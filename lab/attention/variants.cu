// Attention prefill variants the engine does not load, kept for the lab (moved verbatim out of
// crates/engine/src/cuda/kernels/attention.cu, which every cold start compiles): 64-row tiles
// (flash_attn_w4_*), f16 K/V read with cp.async (flash_attn_h_*, flash_attn_h_w4_*) and the f16
// copy they read (attn_kv_to_f16). Include after attention.cu (lab/attention/bench.cu, emu.cpp).
// The lab measured flash_attn_h_w4 1.6x faster than the engine's flash_attn_d* at pp8192: the
// next to move into the engine, with its name.

// The f16 cache copies flash_attn_h_* read and attn_kv_to_f16 writes: set by the harness before
// launching them (cudaMemcpyToSymbol; the emulator assigns it), so every variant keeps the
// engine's one-AttnArgs signature.
__device__ AttnKv16 attn_lab_kv16;

#define ATTN_PREFILL_KV16(NAME, D, NW)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * (NW), (NW) == 4 ? 2 : 1) NAME(AttnArgs a) { \
        attn::prefill<D, NW, true>(attn::at_pos(a), attn_lab_kv16);                            \
    }

ATTN_PREFILL(flash_attn_w4_d32, 32, 4, false)
ATTN_PREFILL(flash_attn_w4_d64, 64, 4, false)
ATTN_PREFILL(flash_attn_w4_d128, 128, 4, false)
ATTN_PREFILL(flash_attn_w4_d256, 256, 4, false)
ATTN_PREFILL_KV16(flash_attn_h_d32, 32, 8)
ATTN_PREFILL_KV16(flash_attn_h_d64, 64, 8)
ATTN_PREFILL_KV16(flash_attn_h_d128, 128, 8)
ATTN_PREFILL_KV16(flash_attn_h_d256, 256, 8)
ATTN_PREFILL_KV16(flash_attn_h_w4_d32, 32, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d64, 64, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d128, 128, 4)
ATTN_PREFILL_KV16(flash_attn_h_w4_d256, 256, 4)

// attn_lab_kv16.k/v[row, c] = half(k/v[row, c]) for rows < min(P, q_offset + R), c < Hkv * d; grid.y 0: K, 1: V.
extern "C" __global__ void __launch_bounds__(256) attn_kv_to_f16(AttnArgs a_in) {
    const AttnArgs a = attn::at_pos(a_in);
    const int width = a.Hkv * a.d;
    if (width <= 0 || (width & 7) != 0 || blockIdx.y > 1) return;
    const int nrow = min(a.P, a.q_offset + a.R);
    const int c8n = width / 8;
    const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<i64>(nrow) * c8n) return;
    const int r = static_cast<int>(i / c8n), c = static_cast<int>(i % c8n) * 8;
    const bool is_v = blockIdx.y == 1;
    const float* src = (is_v ? a.v : a.k) + static_cast<i64>(r) * (is_v ? a.ldv : a.ldk) + c;
    const bool vec = attn::aligned(is_v ? a.v : a.k, is_v ? a.ldv : a.ldk, 16);
    const float4 x0 = attn::ld4(src, vec), x1 = attn::ld4(src + 4, vec);
    uint4 u;
    u.x = attn::pack_h2(x0.x, x0.y);
    u.y = attn::pack_h2(x0.z, x0.w);
    u.z = attn::pack_h2(x1.x, x1.y);
    u.w = attn::pack_h2(x1.z, x1.w);
    *reinterpret_cast<uint4*>((is_v ? attn_lab_kv16.v : attn_lab_kv16.k) + static_cast<i64>(r) * attn_lab_kv16.ld + c) = u;
}
