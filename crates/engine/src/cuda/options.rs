//! The CUDA backend's switches, read from the environment once, when the backend opens, and
//! recorded with every measurement (see [`CudaOptions::describe`]).

use crate::EngineError;

/// Plans of at most this many tokens use programmatic dependent launch by default.
pub const PDL_MAX_TOKENS: usize = 16;

/// Flash decoding's key splits per multiprocessor by default (`TALLY_DEC_SPLIT`).
pub const DECODE_SPLITS_PER_SM: u32 = 1;

/// Where programmatic dependent launch is used (`TALLY_PDL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdlMode {
    Off,
    /// Plans of at most [`PDL_MAX_TOKENS`] tokens.
    Small,
    All,
}

/// Every switch of the CUDA backend. Built by [`CudaOptions::from_env`]; an unknown value is an
/// error, not a silent default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// Dense projections of at least this many rows go through cuBLAS on weights decoded to f16
    /// (`TALLY_GEMM_CUBLAS_MIN_M`, default 128; the default since it measured +25% at pp512 and
    /// +42% at pp8192 on the H200, docs/results/2026-12-04-h200-wgmma); `None`
    /// (`TALLY_GEMM=kernels`): the engine's own kernels at every M.
    pub cublas_min_m: Option<usize>,
    /// `TALLY_GEMM_VARIANT=0..3`: forces one kernel of every quantised dense projection (BM 128,
    /// 64, 32 tensor-core tiles, or the GEMV), for experiments. A tile on a shape it cannot run
    /// (K not a multiple of 64) is an error.
    pub gemm_variant: Option<usize>,
    /// Captured CUDA graphs for plans of more than one token (prefill): on unless
    /// `TALLY_NO_GRAPH` is set.
    pub prefill_graph: bool,
    /// The one-token plan captured once and relaunched at every decode step: on unless
    /// `TALLY_NO_GRAPH` is set (`TALLY_NO_GRAPH=decode` turns off this one only).
    pub decode_graph: bool,
    /// `TALLY_GEMV_RW=2|4`: rows per warp of every dense GEMV; `None`: 4 where N >= 8192 (the
    /// qkv and q projections), else 2 (more blocks for a shorter N).
    pub gemv_rw: Option<usize>,
    /// Fused launches on the plain path (gate/up/SwiGlu, add + RMS norm; `ops/fused.rs`): on
    /// unless `TALLY_NO_FUSE` is set (to `1`; any other value is an error).
    pub fuse: bool,
    /// The delta step's fused prologue (`ops/fused.rs`), one of the fused launches: off with
    /// every other under `TALLY_NO_FUSE=1`, alone under `TALLY_NO_FUSE=delta` (to measure it).
    pub fuse_delta: bool,
    /// Programmatic dependent launch (sm_90+): kernels launched with programmatic stream
    /// serialization, so the next kernel's launch and block start overlap this one's tail (in
    /// streams and in captured graphs). `TALLY_PDL=small` (the default): for plans of at most
    /// [`PDL_MAX_TOKENS`] tokens (decode steps, speculative verification), where the gaps
    /// between short kernels are the cost (H200, 35B Q4_K_M: tg128 +8%); `all`: every plan
    /// (pp512 read 4% lower with it in one run, not yet measured side by side); `off`.
    pub pdl: PdlMode,
    /// `TALLY_DEC_SPLIT=1..8`: flash decoding's key splits per multiprocessor (over the KV
    /// heads). More splits put more loads of the cache in flight at depth; the combine merges
    /// more partials.
    pub decode_splits_per_sm: u32,
    /// L2 prefetch of the GEMV weights (`common.cuh`'s `l2_prefetch`): a dense GEMV's blocks
    /// stream their weight rows into L2 before waiting for the previous kernel (with
    /// programmatic dependent launch, while it still runs), a MoE GEMV's once its expert is
    /// known. On unless `TALLY_PREFETCH=off` (compiled away: `-DTALLY_NO_PREFETCH`).
    pub prefetch: bool,
    /// `TALLY_GEMV_BLOCKS=G,G4,M,V` (each 1 to 4): the blocks per multiprocessor that the
    /// launch bounds of `gemv_<t>`, `gemv4_<t>`, `gemv_multi_<t>` and `mmv_<t>` / `mmv_multi_<t>`
    /// ask ptxas to fit (register budget 65536 / (256 x blocks)); default 2 each. An experiment
    /// switch (compiled in: `-DGEMV_MIN_BLOCKS=..` and friends); a lower register budget can
    /// make a kernel spill.
    pub gemv_blocks: [u8; 4],
    /// Many short norm groups (128-thread `norm_rows` blocks, at least 4 blocks a
    /// multiprocessor: prefill's) one warp each, `NORM_W_GROUPS` a block (`norm_rows_w`, bit for
    /// bit the same outputs); `TALLY_NORM=block` runs them one block each (`norm_rows`), for
    /// A/B runs and digest checks.
    pub norm_warp: bool,
    /// `norm_rows_w`'s register form (groups of at most 256 columns: every input of a lane
    /// loaded before the reduction, x read once; bit for bit the loop form); off with
    /// `TALLY_NORM=warp-loop`, for A/B runs.
    pub norm_warp_regs: bool,
    /// `add_rms_norm`'s register form (rows of at most 2 or 4 values a thread at 1,024
    /// threads, 8 at 256: every input loaded before any output is written, bit for bit the loop
    /// form); off with `TALLY_ADD_NORM=loop` (which also stores every output, as `regs` does).
    pub add_norm_regs: bool,
    /// Where `add_rms_norm`'s register form issues its loads (`TALLY_ADD_NORM_LOADS`): by
    /// default (`early`) every load before the first use in both kernels; `prefill` in the
    /// 256-thread prefill kernel only, the 1,024-thread decode kernel interleaving them with the
    /// MoE combine's sums element by element (`-DTALLY_ADD_NORM_PREFILL_EARLY`); `late`
    /// interleaved in both, the form before stop 44 (`-DTALLY_ADD_NORM_LATE`).
    pub add_norm_loads: AddNormLoads,
    /// `TALLY_ADD_NORM_BLOCKS=N` (1 to 4): the blocks per multiprocessor that
    /// `add_rms_norm_256`'s launch bounds ask ptxas to fit (default 2; compiled in:
    /// `-DADD_NORM_256_MIN_BLOCKS=N`). An experiment switch: a lower register budget can spill.
    pub add_norm_blocks: u8,
    /// Dense integer GEMVs of up to `GEMVR_MAX_M` x rows (the output head at one token; every
    /// dense GEMV of a verification batch) on the persistent multi-row `gemvr_<t>` /
    /// `gemvr4_<t>` (each weight byte read once for all rows; gemv4_<t>'s sums bit for bit).
    /// On unless `TALLY_GEMVR=off`.
    pub gemvr: bool,
    /// The one-row integer GEMVs (`gemv_<t>` / `gemv4_<t>` / `gemv_multi_<t>` where they take
    /// the integer body: an integer format, K <= `GEMV_QK_MAX`) on `gemvi_<t>` /
    /// `gemvi_multi_<t>`, that body alone at 2 rows a warp, compiled for up to 4 blocks a
    /// multiprocessor (gemm.cu `GEMVI_MIN_BLOCKS`) instead of 2: the same sums bit for bit.
    /// On unless `TALLY_GEMVI=off` (then `TALLY_GEMV_RW` and `TALLY_GEMV_BLOCKS` apply to them
    /// again). H100, 35B Q4_K_M: tg128 332.5 -> 343.7 tok/s alone, 361.2 with `mmvi`
    /// (docs/results/2026-12-07-stop51/).
    pub gemvi: bool,
    /// The MoE down projections and other K <= 1,024 GEMVs of integer formats that take
    /// `mmv_<t>` / `mmv_multi_<t>` (f32 arithmetic) on `mmvi_<t>` / `mmvi_multi_<t>`: mmv's
    /// geometry with gemv_int_body's integer arithmetic (x quantised once a block into shared
    /// memory), the outputs gemv_<t>'s bit for bit, compiled for `MMVI_MIN_BLOCKS(T)` blocks.
    /// On unless `TALLY_MMVI=off`.
    pub mmvi: bool,
    /// The router of one token on `router_fused` (router.cu): the f32 GEMV with every block's
    /// weight loads in flight at once (each thread 16-byte pieces of 4 rows) instead of
    /// `gemv_f32` (2 rows a warp, 64 blocks of 64 threads, 3% occupancy), and, fused with the
    /// TopK after it, router_topk8's softmax and top-k in the block that finishes last: one
    /// launch where there were two. The unfused router node runs the same GEMV (the logits
    /// alone), so fused and unfused runs stay bit for bit; the logits differ from gemv_f32's in
    /// the last bits (another summation order). Off with `TALLY_ROUTER_FUSE=off`.
    pub router_fuse: bool,
    /// The bulk-fed GEMV (gemm.cu `gemvt_body`: each warp's rows arrive by one bulk copy, S
    /// groups ahead; gemvr's sums bit for bit) for the GEMVs that would take `gemvr_<t>` /
    /// `gemvr4_<t>`, where their rows fit its shared-memory ring: the weight rows a warp of the
    /// one-row kernel, `gemvt_<t>` (4) or `gemvt2_<t>` (2; 2 to 4 x rows always take
    /// `gemvt4_<t>`); 0 keeps gemvr. `TALLY_GEMVT=off|4|2`, default 4: on an H100 the head
    /// 188 -> 153 us in the lab, tg128 +2.1% (docs/results/2026-12-07-stop48/).
    pub gemvt: u8,
    /// The MoE tiles of 2026-12-04 where they measured faster (`ops/matmul.rs` `wg_tile`): the
    /// x-resident wgmma tiles for the down projections (Q4_K from 33 rows per expert on
    /// `gemm_<t>_x96` / `_x128`, Q6_K on `gemm_<t>_x64` / `_x96`) and `gemm_<t>_w32` for the
    /// Q4_K, Q5_K and MXFP4 gate/up of short prompts; off with `TALLY_WGX=off` (the earlier
    /// tiles).
    pub wgx: bool,
    /// The cuBLAS path's dense weights decoded to f16 once, when a plan is first prepared, and
    /// kept while the device has room (`ops/matmul.rs` `keep_f16`); off with
    /// `TALLY_F16_KEEP=off` (decoded into the workspace at every call).
    pub f16_keep: bool,
    /// The routed experts' gate, up and SwiGlu of a prompt in one gated wgmma launch
    /// (`gemm_<t>_g32` / `_g128`, `ops/fused.rs` `expert_gated`: routing and the x conversion
    /// once, no gate/up outputs, no binary map) where their tiles are w32 or w128. Bit for bit
    /// the two launches and the SwiGlu (the lab's `--gated` on the H200, and logits digests,
    /// 2026-12-05); with `TALLY_ADD_NORM=skip` +5.6% at pp512, +4.6% at pp8192
    /// (`docs/results/2026-12-05-h200-stop32/`). `TALLY_GATED=off` runs the three nodes.
    pub gated: bool,
    /// The fused add + norm leaves unstored the intermediate outputs no later node reads (the
    /// routed combine's, the gated shared expert's, the FFN sum's; logits digests equal to
    /// storing them on the H200, 2026-12-05); `TALLY_ADD_NORM=regs` stores them all.
    pub add_norm_skip: bool,
    /// `TALLY_WGX_CLEAR=on`: the x-resident MoE tiles zero their accumulators after each weight
    /// block's store (compiled with `-DTALLY_WGX_CLEAR`), as before 2026-12-04's stop 30, instead
    /// of starting each block's first MMA with scale-d off; ptxas serialises their wgmmas in that
    /// form. For comparison.
    pub wgx_clear: bool,
    /// Prompts of at least `attention::F16_MIN_ROWS` tokens attend through f16 copies of the
    /// K/V cache made once per attention node (`attn_kv_to_f16`, `flash_attn_h_w4_d*`: 64-key
    /// tiles, 4-warp blocks; 1.5x the f32 kernel at pp8192 in the lab, conversion included,
    /// with the same error; +4.5% at pp8192 in the engine, 2026-12-05); `TALLY_ATTN=f32`:
    /// `flash_attn_d*`, which rounds K and V to f16 as it stages them. The default since stop 45
    /// (`TALLY_ATTN=wg`): head dim 256 on `flash_attn_wg_d256` (wgmma, 128-row tiles, V copied
    /// transposed; H100: 1.41x `flash_attn_h_w4_d256` at pp8192 in the lab, prefill +10% at
    /// pp32768 and +2.6% at pp8192), the rest as `f16`.
    pub attn: AttnPath,
    /// A prompt's attention whose query tiles would leave most multiprocessors idle (a
    /// speculative verification of a few tokens, a short turn at depth: one block per KV head
    /// walking every key) splits the keys over the device, as decoding does, and merges the
    /// splits with `flash_attn_combine` (speculative k=3 after an 8,192-token prompt: 228 ->
    /// 403 tok/s on the H200, 2026-12-05); `TALLY_ATTN_SPLIT=off` walks every key per block.
    pub attn_split: bool,
    /// `TALLY_F32_GEMM=tf32`: the F32-weight products of more than 8 rows (the routers of a
    /// prompt or a verification) run on the f32 GEMMs' tiles with the products on the tensor
    /// cores in three tf32 passes (`gemm_f32_tf32` / `_tf32_m32`, 3xTF32: each value split
    /// into tf32 hi + lo, the lo x lo term dropped). Checked on the H200 (4.7e-7 against
    /// float64, simt 1.8e-7) but not faster: the router's tiles are not held by FFMA (0.280
    /// against 0.298 ms at 8,192 rows, 5% slower at 512; the engine +0.3% at pp8192, -0.6% at
    /// pp512, 2026-12-05), so `simt`, FFMA on the CUDA cores, stays the default.
    pub f32_tf32: bool,
    /// Those products (more than 8 rows, at least 64 columns: the routers of prompts) through
    /// cuBLAS's f32 GEMM (`cublasGemmEx`, f32 operands read in place,
    /// `CUBLAS_COMPUTE_32F_PEDANTIC`: f32 products and sums, never tf32). The default since
    /// 2026-12-05 (H100: pp512 +0.7%, pp8192 +1.7%; `tally check` on mid q4_k_m at 1,000 tokens
    /// passes with it, `docs/results/2026-12-05-h100-stop35/`); `TALLY_F32_GEMM=simt` runs the
    /// SIMT GEMM (~30 TFLOP/s) again.
    pub f32_cublas: bool,
    /// `TALLY_EXPERT_F16=on`: the routed experts' down projections of a prompt (K <=
    /// `WGX_K_MAX`, enough rows per expert: `moe::expert_f16_wanted`) read an f16 copy of the
    /// expert weights, decoded once when a plan first needs it and kept while the device has
    /// room (`ops/matmul.rs` `keep_f16`), on the f16 x-resident tiles, instead of decoding the
    /// GGUF blocks in every tile. Decode and verification steps keep reading the GGUF bytes.
    pub expert_f16: bool,
    /// The routed down projections of short prompts (up to 32 rows per expert) on the
    /// x-resident 32-row tile `gemm_<t>_x32` (`ops/matmul.rs` `wg_tile`; lab, H100, 512 tokens:
    /// Q4_K 0.122 against 0.203 ms on m32, Q6_K 0.269 against 0.336 on x64); `TALLY_X32=off`
    /// puts them back on m32, s32 or (Q6_K) x64.
    pub x32: bool,
    /// `TALLY_WGX_WALK=1..16`: the weight blocks (128 output columns each) that one block of
    /// an x-resident MoE tile (x32, x64, x96, x128) walks, so grid.x = ceil(N / 128 / walk);
    /// None: `WgTile::walk` (4 for x32, else 8). An experiment switch: fewer blocks of a longer
    /// walk pay the pipeline fill and the x copy less often, more of a shorter one leave a
    /// shorter tail when the tiles are not a whole number of waves.
    pub wgx_walk: Option<u32>,
    /// A fused `gemv_multi_<t>` launch of 2 to `GEMVR_MAX_M` x rows (a
    /// verification batch, a 2-4 token prompt or tail; the in-projections of one input: qkv, z,
    /// beta, alpha; q, k, v) takes every row in each block, each weight piece loaded and
    /// converted once for all rows, instead of a block per row (`ops/fused.rs` `multi`; integer
    /// formats, K <= `GEMV_QK_MAX / GEMVR_MAX_M`). The same sums bit for bit in the CPU
    /// emulator's `multirow` mode (no fused multiply-adds there; `scripts/gpu/gemv-mr.sh`
    /// compares logits digests on the GPU: the same). On the H200 speculative decoding at k = 3
    /// +1.9% (1.28x -> 1.30-1.31x plain greedy), k = 1 and plain decoding unchanged
    /// (`docs/results/2026-12-05-h200-gemv-mr/`). On unless `TALLY_GEMV_MR=off`.
    pub gemv_mr: bool,
    /// The cuBLAS projections that read one input (qkv, z, beta, alpha; the shared expert's
    /// gate and up) cast it to f16 once (`ops/matmul.rs` `cast_is_current`; the same f16
    /// values, so the same outputs bit for bit). On unless `TALLY_CAST_REUSE=off`.
    pub cast_reuse: bool,
    /// The gated w128 tile of the routed gate/up as its warp-specialised form
    /// (`gemm_<t>_gs128`: two warpgroups only multiply, two only copy and decode; gemm_wg.cuh
    /// `gemm_ws_body`; the same outputs bit for bit) for Q4_K and MXFP4 experts, where it was
    /// measured faster, and with it the Q4_K gate/up on the w128 tables from 51 rows per expert
    /// instead of 101 (`wg_tile`). H100: pp2048 +1.6%, pp8192 +2.1%, pp32768 +1.2%
    /// (docs/results/2026-12-05-h100-stop36). On unless `TALLY_WS=off`.
    pub ws: bool,
    /// With `ws`: the Q4_K and MXFP4 gate/up of more than `WS256_MIN_ROWS` rows per expert on
    /// `gemm_<t>_gs256` (gemm_wg.cuh: 256 x rows a tile, so each decoded weight serves twice
    /// the tokens; the same outputs bit for bit: lab `--gated`, the emulator's `ws256`, logits
    /// digests). H100, 35B Q4_K_M, alternated twice: pp8192 +1.8%, pp32768 +1.4%, pp512 and
    /// pp2048 unchanged (under 128 rows per expert it is not taken; lab, Q4_K gate/up: 0.95x of
    /// gs128 at 4,096 tokens, 1.03x at 8,192; docs/results/2026-12-06-stop46). On unless
    /// `TALLY_WS256=off`.
    pub ws256: bool,
    /// `TALLY_WS256=a2`: gs256 on `gemm_<t>_gs256a` (two A stages: the decoders store a step's
    /// A while the previous step's MMAs run) where its stages fit (weight slots of at most 32
    /// bytes: Q4_K, MXFP4, IQ4_XS, IQ4_NL, Q4_0, Q4_1, Q5_1); the same outputs bit for bit (the
    /// emulator's `ws256a`). Opt-in: slower where timed (H100, 35B Q4_K_M, stop 54, alternated
    /// twice: pp8192 -0.6%, pp32768 -0.4%, pp512 +0.4%; docs/results/2026-12-07-stop54).
    pub ws256_a2: bool,
    /// The downs of the block formats (K <= 512) of more than 100 rows per expert on
    /// `gemm_<t>_xs128` (gemm_wg.cuh `gemm_wsx_body`: the x-resident x128 tile with its warps
    /// specialised, decoders and consumers as in gs128; the same outputs bit for bit).
    /// By default only Q6_K's, the one format it measured faster for (ncu, H100, 35B shapes at
    /// 8,192 tokens: 1,008 us against x96's 1,136; Q4_K 767 against x128's 765;
    /// docs/results/2026-12-06-stop47). `TALLY_WSX=off` (x128 / x96 for all), `=q6_k` (the
    /// default), `=all` (every block format's downs, also `wsx_all`).
    pub wsx: bool,
    /// `TALLY_WSX=all`: xs128 for every block format's downs, not only Q6_K's.
    pub wsx_all: bool,
    /// `TALLY_DELTA_SCAN=ring`: the chunked delta rule's scan on `delta_rule_chunk_scan2`
    /// (two sets of its copied operands, each chunk's bulk copies issued a whole chunk ahead
    /// instead of half a chunk; the same outputs bit for bit: lab/delta/emu_test.cpp).
    /// Opt-in (`=single` is the default, the one-set scan): measured in stop 50 (H100), the
    /// scan 3% faster at 8,192 tokens and prefill within noise, for 75 KB more shared memory.
    pub delta_ring: bool,
    /// `TALLY_DELTA_PREP=prologue`: a prompt's delta gates and q, k L2 norms run inside the
    /// chunked delta rule's prep (`delta_rule_chunk_prep` with the decode step's fused prologue,
    /// ops/fused.rs; key dims of 128): two launches and a read and write of q and k fewer per
    /// linear-attention layer, the same outputs bit for bit (lab/delta/emu_test.cpp). On by
    /// default (`=plain` turns it off): H100, 35B Q4_K_M, alternated twice, pp512 +2.5%, pp8192
    /// +1.3%, pp32768 +1.0% (docs/results/2026-12-07-stop54).
    pub delta_prep_prologue: bool,
    /// `TALLY_NORM_CAST=on`: a prompt's fused norm launches (add + RMS norm, the gated output
    /// norm) also store their output as f16 in `cast_buf` where a cuBLAS projection reads it
    /// next (`matmul::norm_cast_target`), so that projection's `cast_f16_rows` launch goes: the
    /// same f16 values, the same outputs bit for bit (lab/norm/emu_test.cpp). On unless
    /// `TALLY_NORM_CAST=off`: H100, 35B Q4_K_M, alternated twice, pp512 +0.3-0.9%, pp8192
    /// +0.7%, pp32768 +0.8% (docs/results/2026-12-07-stop54).
    pub norm_cast: bool,
}

/// The prefill attention kernels (`TALLY_ATTN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnPath {
    /// `flash_attn_d*`: f32 K/V rounded to f16 as they are staged.
    F32,
    /// `attn_kv_to_f16` then `flash_attn_h_w4_d*` (mma.sync).
    F16,
    /// As `F16`, but head dim 256 on `flash_attn_wg_d256` (wgmma; the default).
    Wg,
    /// As `Wg`, that kernel built with tile t's softmax overlapping tile t - 1's P V
    /// (`-DTALLY_ATTN_WG_PIPE`; for comparison).
    WgPipe,
}

impl AttnPath {
    pub fn name(self) -> &'static str {
        match self {
            AttnPath::F32 => "f32",
            AttnPath::F16 => "f16",
            AttnPath::Wg => "wg",
            AttnPath::WgPipe => "wg-pipe",
        }
    }

    /// Whether head dim 256 takes `flash_attn_wg_d256`.
    pub fn wgmma(self) -> bool {
        matches!(self, AttnPath::Wg | AttnPath::WgPipe)
    }
}

/// Where `add_rms_norm`'s register form issues its loads (`TALLY_ADD_NORM_LOADS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddNormLoads {
    /// Every load before the first use in both kernels (the default since stop 44).
    Early,
    /// Every load first in the 256-thread prefill kernel, interleaved in the 1,024-thread
    /// decode kernel.
    Prefill,
    /// Interleaved with the MoE combine's sums element by element in both (before stop 44).
    Late,
}

/// The launch-bound macros of [`CudaOptions::gemv_blocks`], in its order.
const GEMV_BLOCK_MACROS: [&str; 4] = [
    "GEMV_MIN_BLOCKS",
    "GEMV4_MIN_BLOCKS",
    "GEMV_MULTI_MIN_BLOCKS",
    "MMV_MIN_BLOCKS",
];

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            cublas_min_m: Some(128),
            gemm_variant: None,
            prefill_graph: true,
            decode_graph: true,
            gemv_rw: None,
            fuse: true,
            fuse_delta: true,
            pdl: PdlMode::Small,
            decode_splits_per_sm: DECODE_SPLITS_PER_SM,
            prefetch: true,
            gemv_blocks: [2; 4],
            norm_warp: true,
            norm_warp_regs: true,
            add_norm_regs: true,
            add_norm_loads: AddNormLoads::Early,
            add_norm_blocks: 2,
            gemvr: true,
            gemvi: true,
            router_fuse: true,
            mmvi: true,
            gemvt: 4,
            wgx: true,
            f16_keep: true,
            gated: true,
            add_norm_skip: true,
            wgx_clear: false,
            attn: AttnPath::Wg,
            attn_split: true,
            f32_tf32: false,
            f32_cublas: true,
            expert_f16: false,
            x32: true,
            wgx_walk: None,
            gemv_mr: true,
            cast_reuse: true,
            ws: true,
            ws256: true,
            ws256_a2: false,
            wsx: true,
            wsx_all: false,
            delta_ring: false,
            delta_prep_prologue: true,
            norm_cast: true,
        }
    }
}

impl CudaOptions {
    /// The options of this process's environment.
    pub fn from_env() -> Result<CudaOptions, EngineError> {
        CudaOptions::from_vars(|k| std::env::var(k).ok())
    }

    /// The options from `get` (a variable's value, or `None` when unset).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<CudaOptions, EngineError> {
        let bad = |var: &str, v: &str, want: &str| {
            EngineError::Unsupported(format!("{var}={v}: expected {want}"))
        };
        // A switch of `on` or `off` (unset or empty: the default).
        let on_off = |var: &str, default: bool| match get(var).as_deref() {
            None | Some("") => Ok(default),
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            Some(v) => Err(bad(var, v, "on or off")),
        };
        let mut o = CudaOptions::default();
        match get("TALLY_GEMM").as_deref() {
            Some("kernels") => o.cublas_min_m = None,
            None | Some("") | Some("cublas") => {
                o.cublas_min_m = Some(match get("TALLY_GEMM_CUBLAS_MIN_M") {
                    None => 128,
                    Some(v) => v
                        .parse()
                        .map_err(|_| bad("TALLY_GEMM_CUBLAS_MIN_M", &v, "a row count"))?,
                });
            }
            Some(v) => return Err(bad("TALLY_GEMM", v, "cublas or kernels")),
        }
        if let Some(v) = get("TALLY_GEMM_VARIANT").filter(|v| !v.is_empty()) {
            match v.parse::<usize>() {
                Ok(n) if n < 4 => o.gemm_variant = Some(n),
                _ => return Err(bad("TALLY_GEMM_VARIANT", &v, "0, 1, 2 or 3")),
            }
        }
        match get("TALLY_NO_GRAPH").as_deref() {
            None => {}
            Some("decode") => o.decode_graph = false,
            Some(_) => {
                o.prefill_graph = false;
                o.decode_graph = false;
            }
        }
        match get("TALLY_GEMV_RW").as_deref() {
            None | Some("") => {}
            Some("2") => o.gemv_rw = Some(2),
            Some("4") => o.gemv_rw = Some(4),
            Some(v) => return Err(bad("TALLY_GEMV_RW", v, "2 or 4")),
        }
        match get("TALLY_NO_FUSE").as_deref() {
            None | Some("") | Some("0") => {}
            Some("1") => {
                o.fuse = false;
                o.fuse_delta = false;
            }
            Some("delta") => o.fuse_delta = false,
            Some(v) => {
                return Err(bad(
                    "TALLY_NO_FUSE",
                    v,
                    "1, delta (the delta step's prologue only), or 0 / unset: fused",
                ));
            }
        }
        match get("TALLY_PDL").as_deref() {
            None | Some("") | Some("small") => {}
            Some("all") => o.pdl = PdlMode::All,
            Some("off") => o.pdl = PdlMode::Off,
            Some(v) => return Err(bad("TALLY_PDL", v, "small, all or off")),
        }
        o.prefetch = on_off("TALLY_PREFETCH", o.prefetch)?;
        if let Some(v) = get("TALLY_GEMV_BLOCKS").filter(|v| !v.is_empty()) {
            let want = "four blocks per multiprocessor, 1 to 4 each, as G,G4,M,V (e.g. 3,2,3,3)";
            let parts: Vec<Option<u8>> = v
                .split(',')
                .map(|p| p.trim().parse::<u8>().ok().filter(|n| (1..=4).contains(n)))
                .collect();
            match parts.as_slice() {
                [Some(a), Some(b), Some(c), Some(d)] => o.gemv_blocks = [*a, *b, *c, *d],
                _ => return Err(bad("TALLY_GEMV_BLOCKS", &v, want)),
            }
        }
        match get("TALLY_NORM").as_deref() {
            None | Some("") | Some("warp") => {}
            Some("warp-loop") => o.norm_warp_regs = false,
            Some("block") => o.norm_warp = false,
            Some(v) => return Err(bad("TALLY_NORM", v, "warp, warp-loop or block")),
        }
        match get("TALLY_ADD_NORM").as_deref() {
            None | Some("") | Some("skip") => {}
            Some("regs") => o.add_norm_skip = false,
            Some("loop") => {
                o.add_norm_regs = false;
                o.add_norm_skip = false;
            }
            Some(v) => return Err(bad("TALLY_ADD_NORM", v, "skip, regs or loop")),
        }
        o.add_norm_loads = match get("TALLY_ADD_NORM_LOADS").as_deref() {
            None | Some("") | Some("early") => AddNormLoads::Early,
            Some("prefill") => AddNormLoads::Prefill,
            Some("late") => AddNormLoads::Late,
            Some(v) => return Err(bad("TALLY_ADD_NORM_LOADS", v, "prefill, early or late")),
        };
        if let Some(v) = get("TALLY_ADD_NORM_BLOCKS").filter(|v| !v.is_empty()) {
            o.add_norm_blocks = v
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|n| (1..=4).contains(n))
                .ok_or_else(|| bad("TALLY_ADD_NORM_BLOCKS", &v, "1 to 4"))?;
        }
        o.gemvr = on_off("TALLY_GEMVR", o.gemvr)?;
        o.gemvi = on_off("TALLY_GEMVI", o.gemvi)?;
        o.router_fuse = on_off("TALLY_ROUTER_FUSE", o.router_fuse)?;
        o.mmvi = on_off("TALLY_MMVI", o.mmvi)?;
        match get("TALLY_GEMVT").as_deref() {
            None | Some("") => {}
            Some("off") => o.gemvt = 0,
            Some("4" | "on") => o.gemvt = 4,
            Some("2") => o.gemvt = 2,
            Some(v) => return Err(bad("TALLY_GEMVT", v, "off, 4 or 2")),
        }
        o.wgx = on_off("TALLY_WGX", o.wgx)?;
        o.f16_keep = on_off("TALLY_F16_KEEP", o.f16_keep)?;
        o.wgx_clear = on_off("TALLY_WGX_CLEAR", o.wgx_clear)?;
        o.gated = on_off("TALLY_GATED", o.gated)?;
        o.attn = match get("TALLY_ATTN").as_deref() {
            None | Some("") => o.attn,
            Some("f16") => AttnPath::F16,
            Some("f32") => AttnPath::F32,
            Some("wg") => AttnPath::Wg,
            Some("wg-pipe") => AttnPath::WgPipe,
            Some(v) => return Err(bad("TALLY_ATTN", v, "wg, wg-pipe, f16 or f32")),
        };
        o.attn_split = on_off("TALLY_ATTN_SPLIT", o.attn_split)?;
        match get("TALLY_F32_GEMM").as_deref() {
            // TALLY_GEMM=kernels: the engine's own kernels, the router's too, unless asked.
            None | Some("") => o.f32_cublas &= o.cublas_min_m.is_some(),
            Some("simt") => o.f32_cublas = false,
            Some("tf32") => (o.f32_tf32, o.f32_cublas) = (true, false),
            Some("cublas") => o.f32_cublas = true,
            Some(v) => return Err(bad("TALLY_F32_GEMM", v, "simt, tf32 or cublas")),
        }
        o.expert_f16 = on_off("TALLY_EXPERT_F16", o.expert_f16)?;
        o.x32 = on_off("TALLY_X32", o.x32)?;
        o.gemv_mr = on_off("TALLY_GEMV_MR", o.gemv_mr)?;
        o.cast_reuse = on_off("TALLY_CAST_REUSE", o.cast_reuse)?;
        o.ws = on_off("TALLY_WS", o.ws)?;
        match get("TALLY_WS256").as_deref() {
            None | Some("") => {}
            Some("on") => (o.ws256, o.ws256_a2) = (true, false),
            Some("off") => (o.ws256, o.ws256_a2) = (false, false),
            Some("a2") => (o.ws256, o.ws256_a2) = (true, true),
            Some(v) => return Err(bad("TALLY_WS256", v, "on, off or a2")),
        }
        match get("TALLY_WSX").as_deref() {
            None | Some("") => {}
            Some("off") => (o.wsx, o.wsx_all) = (false, false),
            Some("q6_k") => (o.wsx, o.wsx_all) = (true, false),
            // `on`: its meaning before stop 47 (every block format), for the dated scripts.
            Some("all" | "on") => (o.wsx, o.wsx_all) = (true, true),
            Some(v) => return Err(bad("TALLY_WSX", v, "off, q6_k or all")),
        }
        match get("TALLY_DELTA_SCAN").as_deref() {
            None | Some("") => {}
            Some("single") => o.delta_ring = false,
            Some("ring") => o.delta_ring = true,
            Some(v) => return Err(bad("TALLY_DELTA_SCAN", v, "single or ring")),
        }
        match get("TALLY_DELTA_PREP").as_deref() {
            None | Some("") => {}
            Some("plain") => o.delta_prep_prologue = false,
            Some("prologue") => o.delta_prep_prologue = true,
            Some(v) => return Err(bad("TALLY_DELTA_PREP", v, "plain or prologue")),
        }
        o.norm_cast = on_off("TALLY_NORM_CAST", o.norm_cast)?;
        if let Some(v) = get("TALLY_WGX_WALK").filter(|v| !v.is_empty()) {
            o.wgx_walk = Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| bad("TALLY_WGX_WALK", &v, "1 to 16"))?,
            );
        }
        if let Some(v) = get("TALLY_DEC_SPLIT").filter(|v| !v.is_empty()) {
            o.decode_splits_per_sm = v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=8).contains(n))
                .ok_or_else(|| bad("TALLY_DEC_SPLIT", &v, "1 to 8"))?;
        }
        Ok(o)
    }

    /// Whether a plan of `n_tokens` tokens launches its kernels with programmatic dependent
    /// launch (on a device that has it).
    pub fn pdl_for(&self, n_tokens: usize) -> bool {
        match self.pdl {
            PdlMode::Off => false,
            PdlMode::Small => n_tokens <= PDL_MAX_TOKENS,
            PdlMode::All => true,
        }
    }

    /// Whether a plan of `n_tokens` tokens is captured as a graph.
    pub fn graph_for(&self, n_tokens: usize) -> bool {
        if n_tokens == 1 {
            self.decode_graph
        } else {
            self.prefill_graph
        }
    }

    /// Extra NVRTC defines these options ask for (kernel variants chosen at compile time).
    pub fn defines(&self) -> Vec<String> {
        let mut d = Vec::new();
        if !self.prefetch {
            d.push("-DTALLY_NO_PREFETCH".to_string());
        }
        if self.wgx_clear {
            d.push("-DTALLY_WGX_CLEAR".to_string());
        }
        match self.add_norm_loads {
            AddNormLoads::Early => {}
            AddNormLoads::Prefill => d.push("-DTALLY_ADD_NORM_PREFILL_EARLY".to_string()),
            AddNormLoads::Late => d.push("-DTALLY_ADD_NORM_LATE".to_string()),
        }
        if self.attn == AttnPath::WgPipe {
            d.push("-DTALLY_ATTN_WG_PIPE".to_string());
        }
        if self.add_norm_blocks != 2 {
            d.push(format!(
                "-DADD_NORM_256_MIN_BLOCKS={}",
                self.add_norm_blocks
            ));
        }
        for (m, &b) in GEMV_BLOCK_MACROS.iter().zip(&self.gemv_blocks) {
            if b != 2 {
                d.push(format!("-D{m}={b}"));
            }
        }
        d
    }

    /// `name=value` for every option, as recorded in a measurement's engine info.
    pub fn describe(&self) -> Vec<String> {
        let on = |b: bool| if b { "on" } else { "off" };
        vec![
            match self.cublas_min_m {
                Some(m) => format!("gemm=cublas(min_m={m})"),
                None => "gemm=kernels".into(),
            },
            match self.gemm_variant {
                Some(v) => format!("gemm_variant={v}"),
                None => "gemm_variant=auto".into(),
            },
            format!("prefill_graph={}", on(self.prefill_graph)),
            format!("decode_graph={}", on(self.decode_graph)),
            match self.gemv_rw {
                Some(r) => format!("gemv_rw={r}"),
                None => "gemv_rw=auto".into(),
            },
            format!(
                "fuse={}",
                match (self.fuse, self.fuse_delta) {
                    (true, true) => "on",
                    (true, false) => "on-but-delta",
                    _ => "off",
                }
            ),
            format!("decode_splits_per_sm={}", self.decode_splits_per_sm),
            format!(
                "pdl={}",
                match self.pdl {
                    PdlMode::Off => "off",
                    PdlMode::Small => "small",
                    PdlMode::All => "all",
                }
            ),
            format!("prefetch={}", on(self.prefetch)),
            format!(
                "gemv_blocks={}",
                self.gemv_blocks.map(|b| b.to_string()).join(",")
            ),
            format!(
                "norm={}",
                match (self.norm_warp, self.norm_warp_regs) {
                    (false, _) => "block",
                    (true, true) => "warp",
                    (true, false) => "warp-loop",
                }
            ),
            format!(
                "add_norm={}",
                match (self.add_norm_regs, self.add_norm_skip) {
                    (false, _) => "loop",
                    (true, true) => "skip",
                    (true, false) => "regs",
                }
            ),
            format!(
                "add_norm_loads={}",
                match self.add_norm_loads {
                    AddNormLoads::Prefill => "prefill",
                    AddNormLoads::Early => "early",
                    AddNormLoads::Late => "late",
                }
            ),
            format!("add_norm_blocks={}", self.add_norm_blocks),
            format!("gemvr={}", on(self.gemvr)),
            format!("gemvi={}", on(self.gemvi)),
            format!("mmvi={}", on(self.mmvi)),
            format!("router_fuse={}", on(self.router_fuse)),
            format!(
                "gemvt={}",
                match self.gemvt {
                    0 => "off".to_string(),
                    n => n.to_string(),
                }
            ),
            format!("wgx={}", on(self.wgx)),
            format!("f16_keep={}", on(self.f16_keep)),
            format!("gated={}", on(self.gated)),
            format!("wgx_clear={}", on(self.wgx_clear)),
            format!("attn={}", self.attn.name()),
            format!("attn_split={}", on(self.attn_split)),
            format!(
                "f32_gemm={}",
                if self.f32_tf32 {
                    "tf32"
                } else if self.f32_cublas {
                    "cublas"
                } else {
                    "simt"
                }
            ),
            format!("expert_f16={}", on(self.expert_f16)),
            format!("x32={}", on(self.x32)),
            format!(
                "wgx_walk={}",
                self.wgx_walk.map_or("auto".to_string(), |w| w.to_string())
            ),
            format!("gemv_mr={}", on(self.gemv_mr)),
            format!("cast_reuse={}", on(self.cast_reuse)),
            format!("ws={}", on(self.ws)),
            format!(
                "ws256={}",
                match (self.ws256, self.ws256_a2) {
                    (false, _) => "off",
                    (true, false) => "on",
                    (true, true) => "a2",
                }
            ),
            format!(
                "wsx={}",
                match (self.wsx, self.wsx_all) {
                    (false, _) => "off",
                    (true, false) => "q6_k",
                    (true, true) => "all",
                }
            ),
            format!(
                "delta_scan={}",
                if self.delta_ring { "ring" } else { "single" }
            ),
            format!(
                "delta_prep={}",
                if self.delta_prep_prologue {
                    "prologue"
                } else {
                    "plain"
                }
            ),
            format!("norm_cast={}", on(self.norm_cast)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(vars: &[(&str, &str)]) -> Result<CudaOptions, EngineError> {
        CudaOptions::from_vars(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_are_cublas_from_128_rows_with_graphs() {
        let o = opts(&[]).expect("defaults");
        assert_eq!(o, CudaOptions::default());
        assert_eq!(
            o.describe(),
            [
                "gemm=cublas(min_m=128)",
                "gemm_variant=auto",
                "prefill_graph=on",
                "decode_graph=on",
                "gemv_rw=auto",
                "fuse=on",
                "decode_splits_per_sm=1",
                "pdl=small",
                "prefetch=on",
                "gemv_blocks=2,2,2,2",
                "norm=warp",
                "add_norm=skip",
                "add_norm_loads=early",
                "add_norm_blocks=2",
                "gemvr=on",
                "gemvi=on",
                "mmvi=on",
                "router_fuse=on",
                "gemvt=4",
                "wgx=on",
                "f16_keep=on",
                "gated=on",
                "wgx_clear=off",
                "attn=wg",
                "attn_split=on",
                "f32_gemm=cublas",
                "expert_f16=off",
                "x32=on",
                "wgx_walk=auto",
                "gemv_mr=on",
                "cast_reuse=on",
                "ws=on",
                "ws256=on",
                "wsx=q6_k",
                "delta_scan=single",
                "delta_prep=prologue",
                "norm_cast=on"
            ]
        );
    }

    #[test]
    fn each_switch_is_read() {
        let o = opts(&[
            ("TALLY_GEMM", "cublas"),
            ("TALLY_GEMM_CUBLAS_MIN_M", "64"),
            ("TALLY_GEMM_VARIANT", "2"),
            ("TALLY_NO_GRAPH", "decode"),
            ("TALLY_NO_FUSE", "1"),
            ("TALLY_GEMV_RW", "2"),
            ("TALLY_PDL", "off"),
            ("TALLY_PREFETCH", "off"),
            ("TALLY_NORM", "block"),
            ("TALLY_ADD_NORM", "loop"),
            ("TALLY_GEMVR", "off"),
            ("TALLY_GEMVI", "off"),
            ("TALLY_MMVI", "off"),
            ("TALLY_ROUTER_FUSE", "off"),
            ("TALLY_WGX", "off"),
            ("TALLY_F16_KEEP", "off"),
            ("TALLY_GATED", "off"),
        ])
        .expect("options");
        assert!(!o.fuse && !o.fuse_delta && !o.norm_warp && !o.gemvr && !o.add_norm_regs);
        assert!(!o.gemvi && opts(&[("TALLY_GEMVI", "2")]).is_err());
        assert!(!o.mmvi && opts(&[("TALLY_MMVI", "int")]).is_err());
        assert!(!o.router_fuse && opts(&[("TALLY_ROUTER_FUSE", "1")]).is_err());
        assert!(!o.wgx && opts(&[("TALLY_WGX", "x")]).is_err());
        assert!(!o.f16_keep && opts(&[("TALLY_F16_KEEP", "1")]).is_err());
        assert!(!o.gated && opts(&[("TALLY_GATED", "no")]).is_err());
        assert!(!o.add_norm_skip && o.describe().contains(&"add_norm=loop".into()));
        let c = opts(&[("TALLY_WGX_CLEAR", "on")]).expect("options");
        assert!(c.wgx_clear && c.defines() == ["-DTALLY_WGX_CLEAR"]);
        assert!(opts(&[("TALLY_WGX_CLEAR", "1")]).is_err());
        let a = opts(&[("TALLY_ATTN", "f32")]).expect("options");
        assert!(a.attn == AttnPath::F32 && a.describe().contains(&"attn=f32".into()));
        assert_eq!(
            opts(&[("TALLY_ATTN", "f16")]).expect("options").attn,
            AttnPath::F16
        );
        let w = opts(&[("TALLY_ATTN", "wg")]).expect("options");
        assert!(w.attn == AttnPath::Wg && w.describe().contains(&"attn=wg".into()));
        assert!(w.defines().is_empty());
        let wp = opts(&[("TALLY_ATTN", "wg-pipe")]).expect("options");
        assert!(wp.attn.wgmma() && wp.defines() == ["-DTALLY_ATTN_WG_PIPE"]);
        let e = opts(&[("TALLY_ATTN", "half")])
            .expect_err("half")
            .to_string();
        assert!(
            e.contains("TALLY_ATTN=half") && e.contains("wg, wg-pipe, f16 or f32"),
            "{e}"
        );
        assert!(
            !opts(&[("TALLY_ATTN_SPLIT", "off")])
                .expect("options")
                .attn_split
        );
        assert!(opts(&[("TALLY_ATTN_SPLIT", "yes")]).is_err());
        let t = opts(&[("TALLY_F32_GEMM", "tf32")]).expect("options");
        assert!(t.f32_tf32 && !t.f32_cublas && t.describe().contains(&"f32_gemm=tf32".into()));
        let e = opts(&[("TALLY_F32_GEMM", "tc")])
            .expect_err("tc")
            .to_string();
        assert!(
            e.contains("TALLY_F32_GEMM=tc") && e.contains("simt, tf32 or cublas"),
            "{e}"
        );
        let c = opts(&[("TALLY_F32_GEMM", "simt")]).expect("options");
        assert!(!c.f32_cublas && !c.f32_tf32 && c.describe().contains(&"f32_gemm=simt".into()));
        let c = opts(&[("TALLY_F32_GEMM", "cublas")]).expect("options");
        assert!(c.f32_cublas && !c.f32_tf32);
        // TALLY_GEMM=kernels keeps every product on the engine's kernels unless asked.
        let k = opts(&[("TALLY_GEMM", "kernels")]).expect("options");
        assert!(!k.f32_cublas && k.describe().contains(&"f32_gemm=simt".into()));
        let kc = opts(&[("TALLY_GEMM", "kernels"), ("TALLY_F32_GEMM", "cublas")]).expect("options");
        assert!(kc.f32_cublas);
        let x = opts(&[("TALLY_EXPERT_F16", "on")]).expect("options");
        assert!(x.expert_f16 && x.describe().contains(&"expert_f16=on".into()));
        let r = opts(&[("TALLY_DELTA_SCAN", "ring")]).expect("options");
        assert!(r.delta_ring && r.describe().contains(&"delta_scan=ring".into()));
        assert!(
            !opts(&[("TALLY_DELTA_SCAN", "single")])
                .expect("options")
                .delta_ring
        );
        let c = opts(&[("TALLY_NORM_CAST", "off")]).expect("options");
        assert!(!c.norm_cast && c.describe().contains(&"norm_cast=off".into()));
        assert!(opts(&[("TALLY_NORM_CAST", "1")]).is_err());
        let p = opts(&[("TALLY_DELTA_PREP", "plain")]).expect("options");
        assert!(!p.delta_prep_prologue && p.describe().contains(&"delta_prep=plain".into()));
        let e = opts(&[("TALLY_DELTA_PREP", "on")]).unwrap_err().to_string();
        assert!(
            e.contains("TALLY_DELTA_PREP=on") && e.contains("plain or prologue"),
            "{e}"
        );
        let e = opts(&[("TALLY_DELTA_SCAN", "on")]).unwrap_err().to_string();
        assert!(
            e.contains("TALLY_DELTA_SCAN=on") && e.contains("single or ring"),
            "{e}"
        );
        assert!(opts(&[("TALLY_EXPERT_F16", "f16")]).is_err());
        let g = opts(&[("TALLY_X32", "off")]).expect("options");
        assert!(!g.x32 && g.describe().contains(&"x32=off".into()));
        assert!(opts(&[("TALLY_X32", "2")]).is_err());
        let w = opts(&[("TALLY_WGX_WALK", "4")]).expect("options");
        assert!(w.wgx_walk == Some(4) && w.describe().contains(&"wgx_walk=4".into()));
        assert!(opts(&[("TALLY_WGX_WALK", "0")]).is_err());
        assert!(opts(&[("TALLY_WGX_WALK", "17")]).is_err());
        let r = opts(&[("TALLY_GEMV_MR", "off")]).expect("options");
        assert!(!r.gemv_mr && r.describe().contains(&"gemv_mr=off".into()));
        assert!(opts(&[("TALLY_GEMV_MR", "4")]).is_err());
        assert!(
            !opts(&[("TALLY_CAST_REUSE", "off")])
                .expect("options")
                .cast_reuse
        );
        assert!(opts(&[("TALLY_CAST_REUSE", "no")]).is_err());
        let w = opts(&[("TALLY_WS", "off")]).expect("options");
        assert!(!w.ws && w.describe().contains(&"ws=off".into()));
        assert!(opts(&[("TALLY_WS", "yes")]).is_err());
        let w = opts(&[("TALLY_WS256", "off")]).expect("options");
        assert!(!w.ws256 && w.describe().contains(&"ws256=off".into()));
        assert!(opts(&[("TALLY_WS256", "2")]).is_err());
        let a = opts(&[("TALLY_WS256", "a2")]).expect("options");
        assert!(a.ws256 && a.ws256_a2 && a.describe().contains(&"ws256=a2".into()));
        let s = opts(&[("TALLY_ADD_NORM", "regs")]).expect("options");
        assert!(
            s.add_norm_regs && !s.add_norm_skip && s.describe().contains(&"add_norm=regs".into())
        );
        assert!(opts(&[("TALLY_NORM", "x")]).is_err());
        let l = opts(&[
            ("TALLY_ADD_NORM_LOADS", "late"),
            ("TALLY_ADD_NORM_BLOCKS", "1"),
        ])
        .expect("options");
        assert!(l.add_norm_loads == AddNormLoads::Late && l.add_norm_blocks == 1);
        let d = opts(&[("TALLY_ADD_NORM_LOADS", "prefill")]).expect("options");
        assert_eq!(d.defines(), ["-DTALLY_ADD_NORM_PREFILL_EARLY"]);
        assert_eq!(
            l.defines(),
            ["-DTALLY_ADD_NORM_LATE", "-DADD_NORM_256_MIN_BLOCKS=1"]
        );
        assert!(l.describe().contains(&"add_norm_loads=late".into()));
        assert!(opts(&[("TALLY_ADD_NORM_BLOCKS", "5")]).is_err());
        assert!(opts(&[("TALLY_ADD_NORM_LOADS", "first")]).is_err());
        let n = opts(&[("TALLY_NORM", "warp-loop")]).expect("options");
        assert!(
            n.norm_warp && !n.norm_warp_regs && n.describe().contains(&"norm=warp-loop".into())
        );
        assert!(opts(&[]).expect("defaults").norm_warp_regs);
        let d = opts(&[("TALLY_NO_FUSE", "delta")]).expect("options");
        assert!(d.fuse && !d.fuse_delta);
        assert!(d.describe().contains(&"fuse=on-but-delta".to_string()));
        let e = opts(&[("TALLY_NO_FUSE", "2")]).expect_err("2").to_string();
        assert!(e.contains("TALLY_NO_FUSE=2") && e.contains("delta"), "{e}");
        assert!(!o.pdl_for(1));
        assert!(!o.prefetch && o.defines() == ["-DTALLY_NO_PREFETCH"]);
        assert!(opts(&[]).expect("defaults").defines().is_empty());
        let b = opts(&[("TALLY_GEMV_BLOCKS", "3,2,3,1")]).expect("options");
        assert_eq!(
            b.defines(),
            [
                "-DGEMV_MIN_BLOCKS=3",
                "-DGEMV_MULTI_MIN_BLOCKS=3",
                "-DMMV_MIN_BLOCKS=1"
            ]
        );
        for v in ["3", "3,3,3", "3,3,3,5", "0,2,2,2", "a,b,c,d", "3,3,3,3,3"] {
            let e = opts(&[("TALLY_GEMV_BLOCKS", v)]).expect_err(v).to_string();
            assert!(
                e.contains("TALLY_GEMV_BLOCKS") && e.contains("1 to 4"),
                "{v}: {e}"
            );
        }
        let d = opts(&[]).expect("defaults");
        assert!(d.pdl_for(1) && d.pdl_for(PDL_MAX_TOKENS) && !d.pdl_for(PDL_MAX_TOKENS + 1));
        let all = opts(&[("TALLY_PDL", "all")]).expect("options");
        assert!(all.pdl_for(1) && all.pdl_for(8192));
        assert_eq!(o.gemv_rw, Some(2));
        assert_eq!(o.cublas_min_m, Some(64));
        assert_eq!(o.gemm_variant, Some(2));
        assert!(o.graph_for(512) && !o.graph_for(1));
        let none = opts(&[("TALLY_NO_GRAPH", "1")]).expect("options");
        assert!(!none.graph_for(512) && !none.graph_for(1));
        assert_eq!(
            opts(&[("TALLY_GEMM", "cublas")])
                .expect("options")
                .cublas_min_m,
            Some(128)
        );
        assert_eq!(
            opts(&[("TALLY_GEMM", "kernels")])
                .expect("options")
                .cublas_min_m,
            None
        );
    }

    #[test]
    fn unknown_values_are_errors() {
        for vars in [
            [("TALLY_GEMM", "cuBLAS")],
            [("TALLY_GEMM_VARIANT", "4")],
            [("TALLY_GEMM_VARIANT", "m64")],
            [("TALLY_NO_FUSE", "yes")],
            [("TALLY_GEMV_RW", "8")],
            [("TALLY_PDL", "on")],
            [("TALLY_PREFETCH", "1")],
            [("TALLY_DEC_SPLIT", "0")],
            [("TALLY_DEC_SPLIT", "9")],
            [("TALLY_DEC_SPLIT", "two")],
            [("TALLY_WSX", "yes")],
        ] {
            let e = opts(&vars).expect_err("rejected").to_string();
            assert!(e.contains(vars[0].0), "{e}");
        }
        let e = opts(&[("TALLY_GEMM", "cublas"), ("TALLY_GEMM_CUBLAS_MIN_M", "x")])
            .expect_err("rejected");
        assert!(e.to_string().contains("TALLY_GEMM_CUBLAS_MIN_M"));
        let four = opts(&[("TALLY_DEC_SPLIT", "4")]).expect("options");
        assert_eq!(four.decode_splits_per_sm, 4);
        let e = opts(&[("TALLY_GEMVT", "8")])
            .expect_err("rejected")
            .to_string();
        assert!(e.contains("off, 4 or 2"), "{e}");
        for (v, n) in [("off", 0), ("4", 4), ("on", 4), ("2", 2)] {
            assert_eq!(
                opts(&[("TALLY_GEMVT", v)]).expect("options").gemvt,
                n,
                "{v}"
            );
        }
        let e = opts(&[("TALLY_WSX", "yes")])
            .expect_err("rejected")
            .to_string();
        assert!(e.contains("off, q6_k or all"), "{e}");
        for (v, wsx, all) in [
            ("off", false, false),
            ("q6_k", true, false),
            ("all", true, true),
            ("on", true, true),
        ] {
            let o = opts(&[("TALLY_WSX", v)]).expect("options");
            assert_eq!((o.wsx, o.wsx_all), (wsx, all), "{v}");
        }
    }
}
