// Written from crates/engine/src/cuda/consts.rs (the one source of these values; NVRTC gets
// them as -D options): nvcc builds of the kernels (lab harnesses, emulators) include this.
// Regenerate: TALLY_WRITE_CONSTS=1 cargo test -p tally-engine host_consts_header
#pragma once
#define GEMM_BN 128
#define GEMM_BK 64
#define GEMM_THREADS 256
#define GEMM_LDS 72
#define GEMM_WSTAGES 3
#define SWP_BN 128
#define SWP_BK 128
#define SWP_LDS 136
#define SWP_STAGES 3
#define WS_THREADS 512
#define WS_XSTAGES 4
#define WS_ASTAGES 1
#define WS_RSTAGES 3
#define GEMV_ROWS 16
#define GEMV_THREADS 256
#define MMV_THREADS 256
#define GEMV_MULTI_SEGS 4
#define GEMV_QK_MAX 8192
#define GEMVR_K_MAX 4096
#define GEMVR_MAX_M 4
#define SIMT_THREADS 256
#define SIMT_STAGES 3
#define SIMT_BM 64
#define SIMT_BN 64
#define SIMT_BK 16
#define SIMT_M32_BM 32
#define SIMT_M32_BN 32
#define SIMT_M32_KS 4
#define SIMT_M32_BK 32
#define DELTA_C 64
#define DELTA_NS 32
#define DELTA_DV_MAX 128
#define ATTN_DEC_MAXQ 8
#define ATTN_DEC_STEP 64
#define ATTN_COMBINE_THREADS 256
#define ATTN_COMBINE_MAX_SPLITS 1024
#define ATTN_NW 8
#define CONV_ROWS 32
#define CONV_THREADS 128
#define NORM_W_GROUPS 8
#define MOE_ROUTE_THREADS 1024
#define MOE_ROUTE_MAX_E 256
#define SAMPLE_THREADS 1024
