//! Tile, block and shared-memory constants that the host and the kernels both use, defined once
//! here. NVRTC gets each as a `-D` option ([`nvrtc_defines`]); nvcc builds of the kernel sources
//! (the lab harnesses, the CPU emulators) include `kernels/host_consts.cuh`, which is
//! [`header`]'s text (a test keeps the two equal). The kernel sources define none of them.

/// Output columns per tensor-core GEMM block.
pub const GEMM_BN: i64 = 128;
/// K step of the tensor-core GEMMs (they need K % GEMM_BK == 0).
pub const GEMM_BK: i64 = 64;
/// Threads per tensor-core GEMM block.
pub const GEMM_THREADS: u32 = 256;
/// f16 row stride of the GEMM's shared tiles (64 + 8 halves: ldmatrix bank spread).
pub const GEMM_LDS: i64 = 72;
/// Stages of raw weight bytes in flight per GEMM thread.
pub const GEMM_WSTAGES: i64 = 3;
/// Weight rows (output columns) per block of the swapped tile `gemm_<t>_s32` (16 per warp).
pub const SWP_BN: i64 = 128;
/// K step of the swapped tile (it needs K % SWP_BK == 0).
pub const SWP_BK: i64 = 128;
/// f16 row stride of the swapped tile's x stages (128 + 8 halves).
pub const SWP_LDS: i64 = 136;
/// Stages of raw weight bytes per thread in the swapped tile's ring.
pub const SWP_STAGES: i64 = 3;
/// The warp-specialised gated wgmma tile (gemm_<t>_gs128, gemm_wg.cuh `gemm_ws_body`): threads
/// a block (two consumer warpgroups, two decoder warpgroups), x stages (copies run one fewer
/// steps ahead), A stages, the decoders' weight-ring stages.
pub const WS_THREADS: u32 = 512;
pub const WS_XSTAGES: i64 = 4;
pub const WS_ASTAGES: i64 = 1;
pub const WS_RSTAGES: i64 = 3;
/// Its 256-row form (gemm_<t>_gs256): x stages (64 KB each; the x copies run one step ahead)
/// and weight-ring stages (the weights run this many steps ahead).
pub const WS256_XSTAGES: i64 = 2;
pub const WS256_RSTAGES: i64 = 3;
/// Weight-ring stages of gs256 with two A stages (gemm_<t>_gs256a, `TALLY_WS256=a2`).
pub const WS256A_RSTAGES: i64 = 2;
/// Output columns per `gemv_<t>` block.
pub const GEMV_ROWS: i64 = 16;
/// Threads per `gemv_<t>` block.
pub const GEMV_THREADS: u32 = 256;
/// Threads per `mmv_<t>` block.
pub const MMV_THREADS: u32 = 256;
/// Most projections one `gemv_multi_<t>` launch runs.
pub const GEMV_MULTI_SEGS: usize = 4;
/// Longest row (K) the integer GEMV takes (gemm.cu's gemv_int_body: its x row in shared memory,
/// 2.5 bytes per element, 20 KB); the integer formats' longer rows take the f32 GEMV.
pub const GEMV_QK_MAX: i64 = 8192;
/// Longest row (K) of the multi-row persistent GEMV (`gemvr_<t>`, `gemvr4_<t>`): its x rows
/// live in dynamic shared memory, (K / 8 + K / 32) x 16 bytes each (40 KB at 4 rows of 4096).
pub const GEMVR_K_MAX: i64 = 4096;
/// Ring stages a warp of the bulk-fed GEMV (`gemvt_<t>`: 4 weight rows a stage, `gemvt2_<t>`: 2)
/// keeps: each stage is one bulk copy of the warp's rows, issued this many row groups ahead.
pub const GEMVT_STAGES: i64 = 3;
/// Most x rows of `gemvr4_<t>` (`gemvr_<t>` takes one), and of one block of a multi-row
/// `gemv_multi_<t>` launch (`MultiGemvArgs::mr`).
pub const GEMVR_MAX_M: usize = 4;
/// Weight rows an integer-GEMV block should cover at least: each block quantises the whole x row
/// once, so the host launches those GEMVs with blocks of at least this many weight rows (on the
/// H200 the 2-warp blocks of the out projection, 4 weight rows, spent more on that than they
/// saved: 8.35 -> 12.5 us, docs/results/2026-12-03-h200-gemv-int/).
pub const GEMV_INT_MIN_ROWS: usize = 16;
/// Threads per block of the f32 SIMT GEMMs.
pub const SIMT_THREADS: u32 = 256;
/// Shared-memory stages of the f32 SIMT GEMMs.
pub const SIMT_STAGES: i64 = 3;
/// Square block tile of `gemm_f32_simt`.
pub const SIMT_TILE: i64 = 64;
/// K step of `gemm_f32_simt`.
pub const SIMT_BK: i64 = 16;
/// Square block tile of `gemm_f32_simt_m32`.
pub const SIMT_M32_TILE: i64 = 32;
/// K slices of `gemm_f32_simt_m32` (thread groups splitting each K step).
pub const SIMT_M32_KS: i64 = 4;
/// K step of `gemm_f32_simt_m32`.
pub const SIMT_M32_BK: i64 = 32;
/// Tokens per chunk of the chunked delta rule.
pub const DELTA_C: i64 = 64;
/// State columns per delta-rule scan / step block.
pub const DELTA_NS: i64 = 32;
/// Largest value head dimension of the delta rule (its shared layouts are sized for it).
pub const DELTA_DV_MAX: i64 = 128;
/// At most this many query rows (R * H / Hkv) go to flash decoding.
pub const ATTN_DEC_MAXQ: i64 = 8;
/// Keys per flash-decoding step (and the granularity of its key splits).
pub const ATTN_DEC_STEP: i64 = 64;
/// Threads of a `flash_attn_combine` block (one block per query row and head).
pub const ATTN_COMBINE_THREADS: u32 = 256;
/// Most key splits `flash_attn_combine` merges (its shared weights).
pub const ATTN_COMBINE_MAX_SPLITS: i64 = 1024;
/// Warps per prefill attention block (`flash_attn_d*`: 16 query rows each).
pub const ATTN_NW: i64 = 8;
/// Tokens per `conv_silu` block.
pub const CONV_ROWS: i64 = 32;
/// Threads per `conv_silu` block (4 channels each).
pub const CONV_THREADS: u32 = 128;
/// (row, group) pairs of a `norm_rows_w` block (one warp each).
pub const NORM_W_GROUPS: i64 = 8;
/// Threads of the one `moe_route` block.
pub const MOE_ROUTE_THREADS: u32 = 1024;
/// Most experts `moe_route` takes.
pub const MOE_ROUTE_MAX_E: i64 = 256;
/// Threads of the one `sample_token` block.
pub const SAMPLE_THREADS: u32 = 1024;

/// Every constant by its name in the kernel sources.
pub const DEFINES: &[(&str, i64)] = &[
    ("GEMM_BN", GEMM_BN),
    ("GEMM_BK", GEMM_BK),
    ("GEMM_THREADS", GEMM_THREADS as i64),
    ("GEMM_LDS", GEMM_LDS),
    ("GEMM_WSTAGES", GEMM_WSTAGES),
    ("SWP_BN", SWP_BN),
    ("SWP_BK", SWP_BK),
    ("SWP_LDS", SWP_LDS),
    ("SWP_STAGES", SWP_STAGES),
    ("WS_THREADS", WS_THREADS as i64),
    ("WS_XSTAGES", WS_XSTAGES),
    ("WS_ASTAGES", WS_ASTAGES),
    ("WS_RSTAGES", WS_RSTAGES),
    ("WS256_XSTAGES", WS256_XSTAGES),
    ("WS256_RSTAGES", WS256_RSTAGES),
    ("WS256A_RSTAGES", WS256A_RSTAGES),
    ("GEMV_ROWS", GEMV_ROWS),
    ("GEMV_THREADS", GEMV_THREADS as i64),
    ("MMV_THREADS", MMV_THREADS as i64),
    ("GEMV_MULTI_SEGS", GEMV_MULTI_SEGS as i64),
    ("GEMV_QK_MAX", GEMV_QK_MAX),
    ("GEMVR_K_MAX", GEMVR_K_MAX),
    ("GEMVR_MAX_M", GEMVR_MAX_M as i64),
    ("GEMVT_STAGES", GEMVT_STAGES),
    ("SIMT_THREADS", SIMT_THREADS as i64),
    ("SIMT_STAGES", SIMT_STAGES),
    ("SIMT_BM", SIMT_TILE),
    ("SIMT_BN", SIMT_TILE),
    ("SIMT_BK", SIMT_BK),
    ("SIMT_M32_BM", SIMT_M32_TILE),
    ("SIMT_M32_BN", SIMT_M32_TILE),
    ("SIMT_M32_KS", SIMT_M32_KS),
    ("SIMT_M32_BK", SIMT_M32_BK),
    ("DELTA_C", DELTA_C),
    ("DELTA_NS", DELTA_NS),
    ("DELTA_DV_MAX", DELTA_DV_MAX),
    ("ATTN_DEC_MAXQ", ATTN_DEC_MAXQ),
    ("ATTN_DEC_STEP", ATTN_DEC_STEP),
    ("ATTN_COMBINE_THREADS", ATTN_COMBINE_THREADS as i64),
    ("ATTN_COMBINE_MAX_SPLITS", ATTN_COMBINE_MAX_SPLITS),
    ("ATTN_NW", ATTN_NW),
    ("CONV_ROWS", CONV_ROWS),
    ("CONV_THREADS", CONV_THREADS as i64),
    ("NORM_W_GROUPS", NORM_W_GROUPS),
    ("MOE_ROUTE_THREADS", MOE_ROUTE_THREADS as i64),
    ("MOE_ROUTE_MAX_E", MOE_ROUTE_MAX_E),
    ("SAMPLE_THREADS", SAMPLE_THREADS as i64),
];

/// The NVRTC options that define every constant (and `TALLY_NVRTC`, which keeps
/// `host_consts.cuh` out).
pub fn nvrtc_defines() -> Vec<String> {
    let mut v = vec!["-DTALLY_NVRTC".to_string()];
    v.extend(DEFINES.iter().map(|(n, x)| format!("-D{n}={x}")));
    v
}

/// The text of `kernels/host_consts.cuh`: the same values for nvcc builds.
pub fn header() -> String {
    let mut s = String::from(
        "// Written from crates/engine/src/cuda/consts.rs (the one source of these values; NVRTC gets\n\
         // them as -D options): nvcc builds of the kernels (lab harnesses, emulators) include this.\n\
         // Regenerate: TALLY_WRITE_CONSTS=1 cargo test -p tally-engine host_consts_header\n\
         #pragma once\n",
    );
    for (n, x) in DEFINES {
        s.push_str(&format!("#define {n} {x}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_consts_header_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/cuda/kernels/host_consts.cuh"
        );
        if std::env::var_os("TALLY_WRITE_CONSTS").is_some() {
            std::fs::write(path, header()).expect("write host_consts.cuh");
        }
        let on_disk = std::fs::read_to_string(path).expect("read host_consts.cuh");
        assert_eq!(
            on_disk,
            header(),
            "kernels/host_consts.cuh is stale: TALLY_WRITE_CONSTS=1 cargo test -p tally-engine host_consts_header"
        );
    }

    #[test]
    fn no_kernel_source_defines_a_host_constant() {
        for src in crate::cuda::compile::SOURCES {
            for (n, _) in DEFINES {
                assert!(
                    !src.text.contains(&format!("#define {n} ")),
                    "{}.cu defines {n}, which consts.rs owns",
                    src.name
                );
            }
        }
    }
}
