// Attention prefill variants the engine does not load, kept for the lab (moved verbatim out of
// crates/engine/src/cuda/kernels/attention.cu, which every cold start compiles): 64-row tiles
// with f32 K/V (flash_attn_w4_*) and 128-row tiles with f16 K/V (flash_attn_h_*; they read the
// copies at AttnArgs.k16 / v16 that the engine's attn_kv_to_f16 writes). Include after
// attention.cu (lab/attention/bench.cu, emu.cpp). The engine's f16 kernel is flash_attn_h_w4_*.

#define ATTN_PREFILL_KV16_LAB(NAME, D, NW)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * (NW), (NW) == 4 ? 2 : 1) NAME(AttnArgs a) { \
        attn::prefill<D, NW, true>(attn::at_pos(a), AttnKv16{a.k16, a.v16, a.ld16});           \
    }

ATTN_PREFILL(flash_attn_w4_d32, 32, 4, false)
ATTN_PREFILL(flash_attn_w4_d64, 64, 4, false)
ATTN_PREFILL(flash_attn_w4_d128, 128, 4, false)
ATTN_PREFILL(flash_attn_w4_d256, 256, 4, false)
ATTN_PREFILL_KV16_LAB(flash_attn_h_d32, 32, 8)
ATTN_PREFILL_KV16_LAB(flash_attn_h_d64, 64, 8)
ATTN_PREFILL_KV16_LAB(flash_attn_h_d128, 128, 8)
ATTN_PREFILL_KV16_LAB(flash_attn_h_d256, 256, 8)
// flash_attn_wg_d256 with tile t's softmax overlapping tile t - 1's P V (the engine's kernel
// built with TALLY_ATTN_WG_PIPE; attention_wg.cuh, which the SIMT emulator of lab/attention/emu
// leaves out).
#ifndef TALLY_ATTN_EMU
ATTN_WG_KERNEL(flash_attn_wg_pipe_d256, true)
#endif
