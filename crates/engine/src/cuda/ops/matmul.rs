//! Dense projections (`Op::MatMul`, reference `cpu/ops/matmul.rs`): the tensor-core GEMMs and
//! GEMVs of `kernels/gemm.cu` per weight type, the exact f32 SIMT GEMM of F32 weights (the
//! router), and the opt-in cuBLAS path.

use tally_gguf::GgmlType;
use tally_model::{OutLayout, Plan, View};

use super::Io;
use crate::EngineError;
use crate::cuda::args::{CastF16Args, DequantF16Args, GemmArgs};
use crate::cuda::consts::{
    GEMM_BK, GEMM_BN, GEMM_LDS, GEMM_THREADS, GEMM_WSTAGES, GEMV_INT_MIN_ROWS, GEMV_QK_MAX,
    GEMV_THREADS, GEMVR_K_MAX, GEMVR_MAX_M, GEMVT_STAGES, MMV_THREADS, SIMT_M32_TILE, SIMT_THREADS,
    SIMT_TILE, SWP_BK, SWP_BN, SWP_LDS, SWP_STAGES,
};
use crate::cuda::kernels::{GEMM_TYPES, GemmSet, Kernels};
use crate::cuda::launch::{Kernel, blocks, launch};
use crate::cuda::mem::DevBuf;
use crate::cuda::{CudaBackend, DevWeight};

/// Rows one `mmv_<t>` block step covers (mmv_rows_per_step in gemm.cu): groups of the pieces
/// of a row (K/32, rounded up to a power of two) times the rows each thread unrolls.
fn mmv_rows_per_step(ty: GgmlType, k: usize) -> usize {
    let tpr = (k / 32)
        .max(1)
        .next_power_of_two()
        .min(MMV_THREADS as usize);
    let unroll = match ty {
        GgmlType::Q6_K | GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q3_K => 2,
        _ => 4,
    };
    (MMV_THREADS as usize / tpr) * unroll
}

/// Whether a one-row-at-a-time product goes to `mmv_<t>` instead of `gemv_<t>`. Measured on
/// the H200 (lab/gemm/bench.cu --decode, launches back to back,
/// docs/results/2026-12-02-h200-decode-host/): mmv wins on the MoE down projection (K = 512:
/// gemv_<t> leaves half of each warp's lanes idle; 7.8 against 13.8 us at Q4_K); the 248,320-row
/// output head, which went to mmv before gemv4_<t> existed, is faster on gemv4_<t> (242 against
/// 270 us at Q6_K, 1.73 TB/s); elsewhere the two are within a few percent and gemv_<t> stays.
pub(crate) fn use_mmv(ty: GgmlType, k: usize) -> bool {
    GEMM_TYPES.contains(&ty) && k % 32 == 0 && k / 32 <= MMV_THREADS as usize && k <= 1024
}

/// Grid width and threads of a GEMV launch over `n` output columns and `m` rows (or MoE tiles),
/// each warp owning `cols_per_warp` columns whatever the block size (`gemv_<t>`: 2, `gemv4_<t>`:
/// 4, paired: 1): the full GEMV_THREADS where that gives every multiprocessor two blocks, else
/// down to 2 warps, so a short N (the router, the shared expert, beta/alpha) spreads over more
/// multiprocessors (a block's work is latency, not bandwidth); never below `min_threads`
/// ([`gemv_min_threads`]).
pub(crate) fn gemv_grid(
    n: usize,
    cols_per_warp: usize,
    m: usize,
    sms: u32,
    min_threads: u32,
) -> (u32, u32) {
    let cols = |threads: u32| cols_per_warp * (threads / 32) as usize;
    let mut threads = GEMV_THREADS;
    while threads > min_threads.max(64) && n.div_ceil(cols(threads)) * m.max(1) < 2 * sms as usize {
        threads /= 2;
    }
    (blocks(n as i64, cols(threads) as u32), threads)
}

/// Whether `gemv_<t>` of `ty` weights takes its integer body (gemm.cu's gemv_int_body: every
/// integer format, rows up to GEMV_QK_MAX) rather than the f32 one.
pub(crate) fn gemv_is_int(ty: GgmlType, k: usize) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) && k as i64 <= GEMV_QK_MAX
}

/// The fewest threads a GEMV block of `weight_rows_per_warp` rows a warp (2 or 4; paired: 2)
/// should have: the integer body quantises x once per block, so its blocks cover at least
/// GEMV_INT_MIN_ROWS weight rows; 64 otherwise.
pub(crate) fn gemv_min_threads(ty: GgmlType, k: usize, weight_rows_per_warp: usize) -> u32 {
    if !gemv_is_int(ty, k) {
        return 64;
    }
    let warps = GEMV_INT_MIN_ROWS.div_ceil(weight_rows_per_warp.max(1)) as u32;
    (32 * warps).clamp(64, GEMV_THREADS)
}

/// The one-row GEMV kernel for `ty` weights over K = `k` at 2 rows a warp (or paired):
/// `gemvi_<t>` where it takes the integer body and `TALLY_GEMVI` is on (the same sums,
/// compiled for more blocks a multiprocessor), `gemv_<t>` otherwise.
pub(crate) fn gemv2_kernel(b: &CudaBackend, set: &GemmSet, ty: GgmlType, k: usize) -> Kernel {
    if use_gemvi(b, ty, k) {
        set.gemvi
    } else {
        set.gemv
    }
}

/// `mmv_<t>` (`multi`: `mmv_multi_<t>`) for `ty` weights over K = `k`, or its integer form
/// `mmvi_<t>` / `mmvi_multi_<t>` (gemv_<t>'s sums bit for bit) where the type has one, K fits
/// the integer body and `TALLY_MMVI` is on.
pub(crate) fn mmv_kernel(
    b: &CudaBackend,
    set: &GemmSet,
    ty: GgmlType,
    k: usize,
    multi: bool,
) -> Kernel {
    let int = b.options.mmvi && gemv_is_int(ty, k);
    match (int, multi) {
        (true, true) => set.mmvi_multi,
        (true, false) => set.mmvi,
        (false, true) => set.mmv_multi,
        (false, false) => set.mmv,
    }
}

/// Whether the one-row GEMVs of `ty` weights over K = `k` run on `gemvi_<t>` /
/// `gemvi_multi_<t>` (2 rows a warp for every N: the integer body alone leaves the registers
/// for 4 blocks a multiprocessor, where 4 rows a warp would spill).
pub(crate) fn use_gemvi(b: &CudaBackend, ty: GgmlType, k: usize) -> bool {
    b.options.gemvi && gemv_is_int(ty, k)
}

/// Rows per warp of a dense GEMV of `n` output columns: `TALLY_GEMV_RW`, else 4 where
/// N >= 8192 and 2 below (measured on the H200, docs/results/2026-12-02-h200-decode/, round 6:
/// 4 rows a warp took the 8192-row qkv from 11.5 to 8.9 us but made the 4096-row z and the
/// 2048-row out projection slower, half the blocks). The sums are the same at either.
pub(crate) fn gemv_rows_per_warp(b: &CudaBackend, n: usize) -> usize {
    b.options.gemv_rw.unwrap_or(if n >= 8192 { 4 } else { 2 })
}

/// Whether a dense GEMV of `m` x rows over `n` x `k` weights of `ty` runs on the persistent
/// multi-row `gemvr_<t>` (one row) or `gemvr4_<t>` (2 to GEMVR_MAX_M rows: a verification
/// batch): where gemv4_<t> would (N >= 8192: the 248,320-row output head, whose rows otherwise
/// each read its 417 MB again), integer formats with K <= GEMVR_K_MAX; `TALLY_GEMVR=off` keeps
/// gemv_<t> / gemv4_<t>. The shorter projections of a verification batch stay on gemv_<t>
/// with a block per row: on gemvr4_<t> they made the k = 3 step slower
/// (docs/results/2026-12-04-h200-verify/).
pub(crate) fn use_gemvr(b: &CudaBackend, ty: GgmlType, m: usize, n: usize, k: usize) -> bool {
    b.options.gemvr
        && gemv_is_int(ty, k)
        && k as i64 <= GEMVR_K_MAX
        && (1..=GEMVR_MAX_M).contains(&m)
        && gemv_rows_per_warp(b, n) == 4
}

/// Blocks and threads of a `gemvr_<t>` (`m` = 1: 4 weight rows a warp) or `gemvr4_<t>` (2)
/// launch: gemv4_<t>'s or gemv_<t>'s block size for `n` rows, at most as many blocks as two per
/// multiprocessor at GEMV_THREADS hold (each walks its row groups grid-stride).
pub(crate) fn gemvr_grid(n: usize, m: usize, sms: u32) -> (u32, u32) {
    let rw = if m > 1 { 2 } else { 4 };
    let (groups, threads) = gemv_grid(n, rw, 1, sms, 64);
    let resident = 2 * sms * (GEMV_THREADS / threads);
    (groups.min(resident), threads)
}

/// Dynamic shared memory of `gemvr_<t>` over `m` x rows of `k`: per row, K / 8 16-byte units of
/// int16 values and K / 32 of metadata (gemm.cu's gemvr_body).
pub(crate) fn gemvr_smem_bytes(k: usize, m: usize) -> u32 {
    (m * (k / 8 + k / 32) * 16) as u32
}

/// Dynamic shared memory of a `gemvt_<t>` launch (`rw` weight rows a warp, `threads` threads,
/// rows of `row_bytes`, `m` x rows of `k`): gemm.cu gemvt_body's x rows, GEMVT_STAGES mbarriers
/// a warp, the warps' rings (GEMVT_STAGES stages of `rw` rows) and 16 bytes of slack.
pub(crate) fn gemvt_smem_bytes(
    k: usize,
    row_bytes: usize,
    threads: u32,
    rw: usize,
    m: usize,
) -> usize {
    let warps = (threads / 32) as usize;
    let stages = GEMVT_STAGES as usize;
    m * (k / 8 + k / 32) * 16 + 8 * stages * warps + warps * stages * rw * row_bytes + 16
}

/// The `gemvt_<t>` launch of a GEMV of `m` x rows that `use_gemvr` sends to `gemvr_<t>` /
/// `gemvr4_<t>`, if `TALLY_GEMVT` asks for one and it fits: (kernel index 0 = gemvt, 1 =
/// gemvt2, 2 = gemvt4, blocks, threads, shared memory). GEMV_THREADS a block; as many blocks
/// as fit a multiprocessor's shared memory (SMEM_PER_SM, 1 KB of it reserved a block), at most
/// one per row group; `w` (the weights' device address) and the rows must be whole 16-byte
/// vectors (the bulk copies' unit; every device allocation starts on one).
pub(crate) fn gemvt_launch(
    gemvt: u8,
    w: u64,
    m: usize,
    n: usize,
    k: usize,
    row_bytes: usize,
    sms: u32,
) -> Option<(usize, u32, u32, u32)> {
    let (i, rw) = match (gemvt, m) {
        (0, _) | (_, 0) => return None,
        (_, 2..) => (2, 2),
        (4, 1) => (0, 4),
        (2, 1) => (1, 2),
        _ => return None,
    };
    if w % 16 != 0 || row_bytes % 16 != 0 {
        return None;
    }
    let threads = GEMV_THREADS;
    let smem = gemvt_smem_bytes(k, row_bytes, threads, rw, m);
    if smem > SMEM_OPT_IN_MAX as usize {
        return None;
    }
    let per_sm = (SMEM_PER_SM as usize / (smem + 1024)).max(1) as u32;
    let groups = n.div_ceil(rw * (threads / 32) as usize) as u32;
    Some((i, groups.min(per_sm * sms), threads, smem as u32))
}

/// The grid width of an `mmv_<t>` launch: every row step covered, at most `max_blocks` blocks
/// (each walks the steps blockIdx.x, + gridDim.x, ...).
pub(crate) fn mmv_grid_x(ty: GgmlType, n: usize, k: usize, max_blocks: u32) -> u32 {
    let steps = n.div_ceil(mmv_rows_per_step(ty, k)).max(1);
    (steps as u64).min(u64::from(max_blocks.max(1))) as u32
}

/// ggml's numeric type id (what quant.cuh's QT_* constants are).
pub(crate) fn qt(ty: GgmlType) -> i32 {
    ty.id() as i32
}

/// (layout code, head_dim, n_head) of a projection's output layout, as gemm.cu takes them.
pub(crate) fn layout_code(l: OutLayout) -> (i32, i32, i32) {
    match l {
        OutLayout::Plain => (0, 0, 0),
        OutLayout::QGateSplit { n_head, head_dim } => (1, head_dim as i32, n_head as i32),
    }
}

/// Which kernel of a type runs a product: 0 = BM 128, 1 = BM 64, 2 = BM 32, 3 = GEMV.
/// `forced` (`TALLY_GEMM_VARIANT`) picks one for experiments; the tensor-core tiles need
/// K % 64 == 0, and forcing one on another K is an error (the kernel would leave its output
/// unwritten).
pub(crate) fn dense_variant(
    m: usize,
    n: usize,
    k: usize,
    sms: u32,
    forced: Option<usize>,
) -> Result<usize, EngineError> {
    if let Some(v) = forced {
        if v < 3 && k % 64 != 0 {
            return Err(EngineError::Unsupported(format!(
                "TALLY_GEMM_VARIANT={v} needs K % 64 == 0; this projection has K = {k}"
            )));
        }
        return Ok(v);
    }
    if m <= 8 || k as i64 % GEMM_BK != 0 {
        return Ok(3);
    }
    let n_blocks = (n as u64).div_ceil(GEMM_BN as u64);
    // The largest tile that still gives every SM a block.
    for (v, bm) in [(0usize, 128u64), (1, 64), (2, 32)] {
        if n_blocks * (m as u64).div_ceil(bm) >= u64::from(sms) {
            return Ok(v);
        }
    }
    Ok(2)
}

/// The f32 GEMM of an F32-weight product (m > 8 rows) and its square block tile:
/// `gemm_f32_simt` (64 x 64) when that grid gives every SM a block, else `gemm_f32_simt_m32`
/// (32 x 32, each K step split over 4 thread groups: 4x the blocks for the same work per
/// output); with `tf32` (`TALLY_F32_GEMM=tf32`) their 3xTF32 forms `gemm_f32_tf32` /
/// `gemm_f32_tf32_m32` (the same tiles).
pub(crate) fn simt_variant(m: usize, n: usize, sms: u32, tf32: bool) -> Simt {
    let tiles = |t: i64| (n as u64).div_ceil(t as u64) * (m as u64).div_ceil(t as u64);
    match (tiles(SIMT_TILE) >= u64::from(sms), tf32) {
        (true, false) => Simt::Tile64,
        (false, false) => Simt::Tile32,
        (true, true) => Simt::Tf32,
        (false, true) => Simt::Tf32M32,
    }
}

/// The two f32 SIMT GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Simt {
    /// `gemm_f32_simt`: SIMT_TILE square tiles.
    Tile64,
    /// `gemm_f32_simt_m32`: SIMT_M32_TILE square tiles, K split over thread groups.
    Tile32,
    /// `gemm_f32_tf32`: SIMT_TILE square tiles, 3xTF32 products on the tensor cores.
    Tf32,
    /// `gemm_f32_tf32_m32`: SIMT_M32_TILE square tiles, K split, 3xTF32 products.
    Tf32M32,
}

impl Simt {
    fn tile(self) -> i64 {
        match self {
            Simt::Tile64 | Simt::Tf32 => SIMT_TILE,
            Simt::Tile32 | Simt::Tf32M32 => SIMT_M32_TILE,
        }
    }
    fn kernel(self, k: &Kernels) -> Kernel {
        match self {
            Simt::Tile64 => k.gemm_f32_simt,
            Simt::Tile32 => k.gemm_f32_simt_m32,
            Simt::Tf32 => k.gemm_f32_tf32,
            Simt::Tf32M32 => k.gemm_f32_tf32_m32,
        }
    }
}

/// Dynamic shared memory of a tensor-core GEMM tile (`GEMM_SMEM_BYTES(t, bm)` in gemm.cu): two
/// f16 stages of A and B tiles, two row tables, GEMM_WSTAGES stages of raw weight bytes per
/// thread (`GEMM_SLOT_BYTES(t)`, Piece<T>::SLOT_WORDS * 4).
pub(crate) fn gemm_smem_bytes(ty: GgmlType, bm: i64) -> u32 {
    let slot = gemm_slot_bytes(ty);
    (2 * (bm + GEMM_BN) * GEMM_LDS * 2 + 8 * bm + GEMM_WSTAGES * GEMM_THREADS as i64 * slot) as u32
}

/// Raw weight bytes one GEMM thread stages per piece (`GEMM_SLOT_BYTES(t)`,
/// Piece<T>::SLOT_WORDS * 4).
fn gemm_slot_bytes(ty: GgmlType) -> i64 {
    match ty {
        GgmlType::Q5_K | GgmlType::Q8_0 | GgmlType::Q2_K | GgmlType::Q5_0 => 48,
        GgmlType::Q6_K => 112,
        GgmlType::Q3_K => 96,
        GgmlType::F16 | GgmlType::BF16 => 64,
        GgmlType::F32 => 128,
        // Q4_K, the other 32-element formats (Q4_0, Q4_1, Q5_1, IQ4_NL, MXFP4) and IQ4_XS: at
        // most 8 words.
        _ => 32,
    }
}

/// x rows per tile of the swapped tile the engine runs (`gemm_<t>_s32`).
pub(crate) const SWAP_BT: i64 = 32;

/// Dynamic shared memory of the swapped tile (`SWP_SMEM_BYTES(t, bt)` in gemm.cu): two f16 x
/// stages of bt rows, two row tables, SWP_STAGES stages of two weight pieces per thread.
pub(crate) fn swap_smem_bytes(ty: GgmlType, bt: i64) -> u32 {
    let slot = gemm_slot_bytes(ty);
    (2 * bt * SWP_LDS * 2 + 8 * bt + SWP_STAGES * GEMM_THREADS as i64 * 2 * slot) as u32
}

/// x rows per tile of the wgmma tile the engine runs (`gemm_<t>_w128`).
pub(crate) const WG_BT: i64 = 128;

/// Stages of the wgmma tile's ring (`WG_STAGES(t)` in gemm_wg.cuh): 4 for weight slots of up to
/// 32 bytes a piece, 3 up to 64, else 2.
fn wg_stages(ty: GgmlType) -> i64 {
    match gemm_slot_bytes(ty) {
        s if s <= 32 => 4,
        s if s <= 64 => 3,
        _ => 2,
    }
}

/// Dynamic shared memory of the wgmma tile (`WG_SMEM_BYTES(t, bt)` in gemm_wg.cuh): 1024 bytes
/// of alignment slack, S x stages of bt rows of 128 halves, two row tables, S ring stages of
/// two weight pieces per thread.
pub(crate) fn wg_smem_bytes(ty: GgmlType, bt: i64) -> u32 {
    let (s, slot) = (wg_stages(ty), gemm_slot_bytes(ty));
    (1024 + s * 2 * bt * 128 + 8 * bt + s * GEMM_THREADS as i64 * 2 * slot) as u32
}

/// Largest dynamic shared memory a block may ask for on the GPUs the wgmma tiles run on (sm_90:
/// 227 KB).
pub(crate) const SMEM_OPT_IN_MAX: u32 = 232_448;
/// Shared memory of one multiprocessor (Hopper: 228 KB, 1 KB of it reserved for each block).
const SMEM_PER_SM: u32 = 233_472;

/// Most K of the x-resident wgmma tile (`WGX_K_MAX` in gemm_wg.cuh).
pub(crate) const WGX_K_MAX: usize = 512;

/// Dynamic shared memory of the x-resident wgmma tile (`WGX_SMEM_BYTES(t, bt)`): 1024 bytes of
/// alignment slack, every K step of x (WGX_K_MAX / 128 stages of bt rows of 128 halves), two row
/// tables, the weight ring (same stages as the wgmma tile's).
pub(crate) fn wgx_smem_bytes(ty: GgmlType, bt: i64) -> u32 {
    wgx_smem_bytes_ks(ty, bt, WGX_K_MAX, wg_stages(ty))
}

/// Dynamic shared memory of an x-resident tile holding up to `kmax` of K with `s` ring stages
/// (`WGX_SMEM_BYTES_KS(t, bt, kmax, s)`).
fn wgx_smem_bytes_ks(ty: GgmlType, bt: i64, kmax: usize, s: i64) -> u32 {
    let slot = gemm_slot_bytes(ty);
    (1024 + (kmax as i64 / SWP_BK) * 2 * bt * 128 + 8 * bt + s * GEMM_THREADS as i64 * 2 * slot)
        as u32
}

/// Ring stages of `gemm_<t>_x32` (`WGX32_STAGES(t)` in gemm_wg.cuh): 4 for weight slots of up
/// to 32 bytes a piece, else 3.
fn wgx32_stages(ty: GgmlType) -> i64 {
    if gemm_slot_bytes(ty) <= 32 { 4 } else { 3 }
}

/// Dynamic shared memory of `gemm_<t>_x32` (`WGX32_SMEM_BYTES(t)`): 32 x rows of WGX_K_MAX,
/// [`wgx32_stages`] ring stages.
pub(crate) fn wgx32_smem_bytes(ty: GgmlType) -> u32 {
    wgx_smem_bytes_ks(ty, 32, WGX_K_MAX, wgx32_stages(ty))
}

/// The MoE tiles the options allow ([`wg_tile`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MoeTiles {
    /// `CudaOptions::wgx`: the x-resident tiles and w32 (else w128 only).
    pub wgx: bool,
    /// `CudaOptions::x32`: the downs of short prompts on x32 (with `wgx`).
    pub x32: bool,
    /// `CudaOptions::ws` with `CudaOptions::gated`: the Q4_K gate/up leaves w32 for w128 (whose
    /// gated launch is the warp-specialised gs128) above 50 rows per expert instead of 100.
    pub ws_gated: bool,
    /// The caller is the gated launch (`ops/fused.rs` `expert_gated`) and `CudaOptions::ws256`
    /// is on: the Q4_K and MXFP4 gate/up of more than [`WS256_MIN_ROWS`] rows per expert take
    /// the 256-row tables of `gemm_<t>_gs256` ([`WgTile::W256`], which has no unfused kernel).
    pub ws256: bool,
    /// `CudaOptions::wsx`: the Q6_K downs (K <= WGX_K_MAX) of more than 100 rows per expert on
    /// the warp-specialised x-resident tile ([`WgTile::XS128`]); with `wsx_all`, every block
    /// format's.
    pub wsx: bool,
    /// `CudaOptions::wsx_all` (`TALLY_WSX=all`): xs128 for every block format's downs, not only
    /// Q6_K's.
    pub wsx_all: bool,
}

impl MoeTiles {
    /// The defaults' tiles.
    pub(crate) const DEFAULT: MoeTiles = MoeTiles {
        wgx: true,
        x32: true,
        ws_gated: true,
        ws256: false,
        wsx: true,
        wsx_all: false,
    };
    /// `TALLY_WGX=off`'s tiles.
    #[cfg(test)]
    pub(crate) const NO_WGX: MoeTiles = MoeTiles {
        wgx: false,
        x32: true,
        ws_gated: true,
        ws256: false,
        wsx: false,
        wsx_all: false,
    };
    /// The tiles of the unfused launches.
    pub(crate) fn of(o: &crate::cuda::CudaOptions) -> MoeTiles {
        MoeTiles {
            wgx: o.wgx,
            x32: o.x32,
            ws_gated: o.ws && o.gated,
            ws256: false,
            wsx: o.wsx && o.wgx,
            wsx_all: o.wsx_all,
        }
    }
    /// The tiles of the gated gate/up launch (`expert_gated`): also gs256's where it is on.
    pub(crate) fn gated(o: &crate::cuda::CudaOptions) -> MoeTiles {
        MoeTiles {
            ws256: o.ws256 && o.ws && o.gated && o.wgx,
            ..MoeTiles::of(o)
        }
    }
}

/// Rows per expert above which the gated Q4_K / MXFP4 gate/up runs on gs256 (`MoeTiles::ws256`).
/// lab/gemm `--gated` on the H100 (35B gate/up, uniform routing; docs/results/2026-12-06-stop46):
/// gs256 against gs128 0.95x at 128 rows per expert (4,096 tokens), 1.03x at 256 (8,192; MXFP4
/// 1.01x / 1.08x); nothing was measured between, so the switch sits halfway.
pub(crate) const WS256_MIN_ROWS: f64 = 192.0;

/// The wgmma tile a MoE projection runs on, if any (x converted to f16 in its K order first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WgTile {
    /// `gemm_<t>_w32` / `_w128`: 32 / 128 x rows a tile, one block per 128 weight rows.
    W32,
    W128,
    /// `gemm_<t>_x64` / `_x96` / `_x128`: K <= WGX_K_MAX, the tile's x resident while a block
    /// walks the weight rows (grid.x [`WgTile::grid_x`]).
    X64,
    X96,
    X128,
    /// `gemm_<t>_x32`: the x-resident tile with 32 rows and a deeper ring.
    X32,
    /// 256 x rows a tile: only the gated warp-specialised `gemm_<t>_gs256` (not in
    /// [`WgTile::ALL`]: no unfused kernel; only [`MoeTiles::ws256`] callers get it).
    W256,
    /// `gemm_<t>_xs128`: X128 with its warps specialised (512 threads; not in [`WgTile::ALL`]:
    /// its kernel is `GemmSet::xs128`).
    XS128,
}

impl WgTile {
    /// x rows per tile.
    pub(crate) fn bt(self) -> i64 {
        match self {
            WgTile::W32 | WgTile::X32 => 32,
            WgTile::X64 => 64,
            WgTile::X96 => 96,
            WgTile::W128 | WgTile::X128 | WgTile::XS128 => WG_BT,
            WgTile::W256 => 2 * WG_BT,
        }
    }
    /// Dynamic shared memory of the launch.
    pub(crate) fn smem_bytes(self, ty: GgmlType) -> u32 {
        match self {
            WgTile::W32 | WgTile::W128 => wg_smem_bytes(ty, self.bt()),
            WgTile::W256 => ws256_smem_bytes(ty),
            WgTile::XS128 => wsx_smem_bytes(ty),
            WgTile::X32 => wgx32_smem_bytes(ty),
            x => wgx_smem_bytes(ty, x.bt()),
        }
    }
    /// Threads of a block: the warp-specialised tiles' 512, else 256.
    pub(crate) fn threads(self) -> u32 {
        match self {
            WgTile::W256 | WgTile::XS128 => crate::cuda::consts::WS_THREADS,
            _ => GEMM_THREADS,
        }
    }
    /// grid.x for N output columns: one block per 128 for w32 and w128; for the x-resident
    /// tiles a block per [`WgTile::walk`] of them, or per `walk` (`TALLY_WGX_WALK`).
    pub(crate) fn grid_x(self, n: usize, walk: Option<u32>) -> u32 {
        let blocks = n.div_ceil(SWP_BN as usize).max(1) as u32;
        match self {
            WgTile::W32 | WgTile::W128 | WgTile::W256 => blocks,
            _ => blocks.div_ceil(walk.unwrap_or(self.walk()).max(1)),
        }
    }
    /// Weight blocks (128 output columns) one block of an x-resident tile walks: 4 for x32, 8
    /// for the others (the 35B down, N = 2048: 4 and 2 blocks a tile). A block walking all 16
    /// paid its pipeline fill and x copy once, but the model's routing makes tiles that are not a
    /// whole number of waves, and the last wave's few blocks cost a whole walk: H100, 35B
    /// Q4_K_M, TALLY_WGX_WALK 16 / 8 / 4 / 2 (docs/results/2026-12-06-stop42, call 3): pp512
    /// 14,058 / 14,771 / 14,928 / 14,576 tok/s (x32), pp2048 27,193 / 27,947 / 27,621 / 27,079
    /// (x96); ncu, one pp512: the Q4_K down on x32 157 -> 132 us, the Q6_K 377 -> 312 from 16 to
    /// 4. The lab's uniform routing (about one wave of x32 tiles) had 16 fastest.
    pub(crate) fn walk(self) -> u32 {
        match self {
            WgTile::X32 => 4,
            _ => 8,
        }
    }
    /// The tiles of a type's kernel set, in `GemmSet::wg`'s order.
    pub(crate) const ALL: [WgTile; 6] = [
        WgTile::W32,
        WgTile::W128,
        WgTile::X64,
        WgTile::X96,
        WgTile::X128,
        WgTile::X32,
    ];
}

/// Dynamic shared memory of the warp-specialised tile (`WS_SMEM_BYTES(t)` in gemm_wg.cuh),
/// if it fits a block: 1024 bytes of alignment slack, WS_XSTAGES x stages and WS_ASTAGES A
/// stages of 128 rows of 128 halves, two row tables, WS_RSTAGES ring stages of two weight
/// pieces per decoder thread.
pub(crate) fn ws_smem_if_fits(ty: GgmlType) -> Option<u32> {
    use crate::cuda::consts::{WS_ASTAGES, WS_RSTAGES, WS_XSTAGES};
    let b = 1024
        + WS_XSTAGES * 2 * 128 * 128
        + WS_ASTAGES * 2 * SWP_BN * 128
        + 8 * 128
        + WS_RSTAGES * GEMM_THREADS as i64 * 2 * gemm_slot_bytes(ty);
    (b <= SMEM_OPT_IN_MAX as i64).then_some(b as u32)
}

/// Dynamic shared memory of `gemm_<t>_gs256` (`WS256_SMEM_BYTES(t)` in gemm_wg.cuh): as
/// [`ws_smem_if_fits`]'s with WS256_XSTAGES x stages of 256 rows and WS256_RSTAGES ring stages.
pub(crate) fn ws256_smem_bytes(ty: GgmlType) -> u32 {
    use crate::cuda::consts::{WS_ASTAGES, WS256_RSTAGES};
    ws256_layout_bytes(ty, WS_ASTAGES, WS256_RSTAGES)
}

/// Dynamic shared memory of `gemm_<t>_gs256a` (`WS256A_SMEM_BYTES(t)` in gemm_wg.cuh): gs256's
/// with two A stages and WS256A_RSTAGES ring stages.
pub(crate) fn ws256a_smem_bytes(ty: GgmlType) -> u32 {
    ws256_layout_bytes(ty, 2, crate::cuda::consts::WS256A_RSTAGES)
}

/// [`ws256a_smem_bytes`] where it fits a block (elsewhere the kernel has no code).
pub(crate) fn ws256a_smem_if_fits(ty: GgmlType) -> Option<u32> {
    let b = ws256a_smem_bytes(ty);
    (b <= SMEM_OPT_IN_MAX).then_some(b)
}

/// The 256-row warp-specialised tile's shared memory: 1024 bytes of alignment slack,
/// WS256_XSTAGES x stages of 256 rows, `a_stages` A stages, two row tables and `r_stages`
/// stages of the decoders' weight ring.
fn ws256_layout_bytes(ty: GgmlType, a_stages: i64, r_stages: i64) -> u32 {
    use crate::cuda::consts::WS256_XSTAGES;
    (1024
        + WS256_XSTAGES * 2 * 256 * 128
        + a_stages * 2 * SWP_BN * 128
        + 8 * 256
        + r_stages * GEMM_THREADS as i64 * 2 * gemm_slot_bytes(ty)) as u32
}

/// Dynamic shared memory of `gemm_<t>_xs128` (`WSX_SMEM_BYTES(t)` in gemm_wg.cuh): the resident
/// x (WGX_K_MAX / 128 stages of 128 rows), one A stage, two row tables and the decoders' ring of
/// 3, 2 or 1 stages, the most that fit a block.
pub(crate) fn wsx_smem_bytes(ty: GgmlType) -> u32 {
    use crate::cuda::consts::WS_ASTAGES;
    let with = |rs: i64| {
        1024 + (WGX_K_MAX as i64 / SWP_BK) * 2 * 128 * 128
            + WS_ASTAGES * 2 * SWP_BN * 128
            + 8 * 128
            + rs * GEMM_THREADS as i64 * 2 * gemm_slot_bytes(ty)
    };
    let b = [3, 2, 1]
        .into_iter()
        .map(with)
        .find(|&b| b <= SMEM_OPT_IN_MAX as i64)
        .unwrap_or(with(1));
    b as u32
}

/// The dynamic shared memory of tile `t` for `ty`, if it fits a block.
pub(crate) fn wg_tile_smem_if_fits(ty: GgmlType, t: WgTile) -> Option<u32> {
    let b = t.smem_bytes(ty);
    (b <= SMEM_OPT_IN_MAX).then_some(b)
}

/// The wgmma tile of a MoE projection whose tiles hold about `mean` rows per expert, if one takes
/// it. Measured in lab/gemm (`gemm_bench --wg`, H200, 256 experts, 512, 2,048 and 8,192 tokens:
/// 16, 64 and 256 rows per expert; docs/results/2026-12-04-h200-wgmma and 2026-12-04-h200-wgx)
/// and in the engine:
/// - the gate/up (K >= 1024): w32 up to 40 rows per expert for Q4_K, Q5_K and MXFP4 (512
///   tokens: Q4_K 0.147 ms against 0.168 for the swapped s32, Q5_K 0.176 against 0.202, MXFP4
///   0.146 against 0.173; IQ4_XS and Q8_0 stay on s32) and up to 100 for Q4_K (2,048 tokens:
///   0.317 against 0.369 for m64 and 0.334 for w128); w128 above 100 (8,192 tokens: Q4_K
///   0.647 against 1.06 for m64 and 1.01 for w32). With the warp-specialised gated tile
///   (`tiles.ws_gated`) the Q4_K gate/up leaves w32 above 50 rows per expert: its gated
///   launch gs128 costs about the same for any tile fill up to 128 rows while g32's grows with
///   the rows (H100, 35B gate/up: 2,048 tokens, 64 rows per expert, gs128 0.474 ms against
///   0.583 for g32; 512 tokens, 16 rows, 0.58 against 0.283; docs/results/2026-12-05-h100-stop36);
/// - the down projections (K <= WGX_K_MAX) of every block format, one rule: x32 up to 32 rows
///   per expert, x96 up to 100, x128 above where it fits (else x96: Q6_K). lab/gemm --wg on
///   the H100, the 35B down (docs/results/2026-12-06-stop42): at 512 tokens (16 rows per
///   expert) x32 against what ran before: Q4_K 0.122 ms against 0.203 (m32), Q6_K 0.269
///   against 0.336 (x64), Q5_K 0.131 against 0.268 (m32), Q8_0 0.256 against 0.331 (s32),
///   IQ4_XS 0.166 against 0.198 (s32), MXFP4 0.148 against 0.215 (s32); at 2,048 tokens x96
///   against the next best: Q4_K 0.266 (x32 0.291), Q5_K 0.279 (x32 0.317, s32 0.481), Q8_0
///   0.330 (x64 0.421, m32 0.711), IQ4_XS 0.289 (s32 0.479), MXFP4 0.288 (s32 0.515); at 8,192
///   tokens x128 within 3% of x96 (Q4_K 0.804 / 0.784, Q5_K 0.811 / 0.823, Q8_0 0.918 / 0.959,
///   MXFP4 0.854 / 0.858, IQ4_XS 0.861 / 0.849) and 27-38% faster than w128. Before, only Q4_K
///   and Q6_K took the x-resident tiles (from 33 rows; Q6_K x64 below). The f16 copies of
///   `TALLY_EXPERT_F16` (lab, H200, 2026-12-05): x64 up to 32 rows (512 tokens: 0.305 against
///   Q6_K's 0.375), x96 up to 100 (2,048: 0.342 against 0.428) and x128 above (8,192: 0.900
///   against 1.246); BF16 and F32 experts keep w128 above 100 rows.
///
/// `tiles.wgx` false (`TALLY_WGX=off`): w128 only, as before the x-resident tiles and w32;
/// `tiles.x32` false (`TALLY_X32=off`): the downs of up to 32 rows per expert as before x32 (Q6_K
/// on x64, the others on m32 or s32).
pub(crate) fn wg_tile(ty: GgmlType, k: usize, mean: f64, tiles: MoeTiles) -> Option<WgTile> {
    if k as i64 % SWP_BK != 0 || mean <= 2.0 {
        return None;
    }
    let w128 = (mean > 100.0 && (k >= 1024 || ty == GgmlType::Q6_K)).then_some(WgTile::W128);
    if !tiles.wgx {
        return w128;
    }
    let fits = |t: WgTile| wg_tile_smem_if_fits(ty, t).is_some();
    if k > WGX_K_MAX {
        let w32_rows = match ty {
            GgmlType::Q4_K if tiles.ws_gated => 50.0,
            GgmlType::Q4_K => 100.0,
            GgmlType::Q5_K | GgmlType::MXFP4 => 40.0,
            _ => 0.0,
        };
        // The gated launch's 256-row tile (gs256), where it fits.
        if tiles.ws256
            && matches!(ty, GgmlType::Q4_K | GgmlType::MXFP4)
            && k >= 1024
            && mean > WS256_MIN_ROWS
            && fits(WgTile::W256)
        {
            return Some(WgTile::W256);
        }
        // With the warp-specialised gated tile, Q4_K leaves w32 for w128 at its lower bound.
        let ws_w128 = (tiles.ws_gated && ty == GgmlType::Q4_K && k >= 1024 && mean > w32_rows)
            .then_some(WgTile::W128);
        return if mean <= w32_rows && fits(WgTile::W32) {
            Some(WgTile::W32)
        } else {
            ws_w128.or(w128)
        };
    }
    let first_fit = |ts: &[WgTile]| ts.iter().copied().find(|&t| fits(t));
    // The warp-specialised x-resident tile for the long prompts' downs: Q6_K's by default, every
    // block format's with TALLY_WSX=all. ncu on an H100 (docs/results/2026-12-06-stop47, 35B
    // shapes, 8,192 tokens): Q6_K 1,008 us against x96's 1,136; Q4_K 767 against x128's 765.
    if tiles.wsx
        && (tiles.wsx_all || ty == GgmlType::Q6_K)
        && mean > 100.0
        && !matches!(ty, GgmlType::F16 | GgmlType::BF16 | GgmlType::F32)
        && fits(WgTile::XS128)
    {
        return Some(WgTile::XS128);
    }
    match ty {
        // An expert copy's f16 weights (TALLY_EXPERT_F16; moe::expert_f16_wanted).
        GgmlType::F16 if mean <= 32.0 && fits(WgTile::X64) => Some(WgTile::X64),
        GgmlType::F16 if mean > 100.0 && fits(WgTile::X128) => Some(WgTile::X128),
        GgmlType::F16 if fits(WgTile::X96) => Some(WgTile::X96),
        GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 => w128,
        _ if mean <= 32.0 && tiles.x32 => first_fit(&[WgTile::X32]),
        GgmlType::Q6_K if mean <= 32.0 => first_fit(&[WgTile::X64]),
        _ if mean <= 32.0 => None,
        _ if mean <= 100.0 => first_fit(&[WgTile::X96]).or(w128),
        _ => first_fit(&[WgTile::X128, WgTile::X96]).or(w128),
    }
}

/// Whether a MoE projection whose tiles hold up to 32 rows runs on the swapped tile rather than
/// `gemm_<t>_m32`. Measured in lab/gemm (`gemm_bench --moe`, H200, pp512 routing, 4,096 pairs
/// over 256 experts; docs/results/2026-12-02-h200-moe-swap): faster for gate/up (K = 2048) on
/// every type tried (Q4_K 0.181 -> 0.164 ms, Q8_0 0.537 -> 0.379, IQ4_XS 0.263 -> 0.183, MXFP4
/// 0.256 -> 0.186) and for down (K = 512) on all but Q4_K (0.200 -> 0.215: kept on m32) and
/// Q5_K (equal).
pub(crate) fn use_swap(ty: GgmlType, k: usize) -> bool {
    k as i64 % SWP_BK == 0 && !(matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) && k < 2048)
}

/// Rows per tensor-core tile of the three tile kernels.
pub(crate) const TILE_BM: [i64; 3] = [128, 64, 32];

/// The host's sizes asserted equal to gemm.cu's own (appended to it at build time).
pub fn geometry_asserts() -> String {
    let mut s =
        format!("static_assert(WGX_K_MAX == {WGX_K_MAX}, \"WGX_K_MAX differs from matmul.rs\");\n");
    for ty in GEMM_TYPES {
        for bm in TILE_BM {
            s += &format!(
                "static_assert(GEMM_SMEM_BYTES({}, {bm}) == {}, \"GEMM smem of {} BM {bm} differs from matmul.rs\");\n",
                qt(ty),
                gemm_smem_bytes(ty, bm),
                ty.name()
            );
        }
        s += &format!(
            "static_assert(SWP_SMEM_BYTES({}, {SWAP_BT}) == {}, \"swapped-tile smem of {} differs from matmul.rs\");\n",
            qt(ty),
            swap_smem_bytes(ty, SWAP_BT),
            ty.name()
        );
        s += &format!(
            "static_assert(WG_SMEM_BYTES({}, {WG_BT}) == {}, \"wgmma-tile smem of {} differs from matmul.rs\");\n",
            qt(ty),
            wg_smem_bytes(ty, WG_BT),
            ty.name()
        );
        s += &format!(
            "static_assert(WG_SMEM_BYTES({}, 32) == {}, \"wgmma-tile smem of {} differs from matmul.rs\");\n",
            qt(ty),
            wg_smem_bytes(ty, 32),
            ty.name()
        );
        for bt in [64, 96, 128] {
            s += &format!(
                "static_assert(WGX_SMEM_BYTES({}, {bt}) == {}, \"x-resident tile smem of {} differs from matmul.rs\");\n",
                qt(ty),
                wgx_smem_bytes(ty, bt),
                ty.name()
            );
        }
        s += &format!(
            "static_assert(WGX32_SMEM_BYTES({}) == {}, \"x32 smem of {} differs from matmul.rs\");\n",
            qt(ty),
            wgx32_smem_bytes(ty),
            ty.name()
        );
        s += &format!(
            "static_assert(WSX_SMEM_BYTES({}) == {}, \"xs128 smem of {} differs from matmul.rs\");\n",
            qt(ty),
            wsx_smem_bytes(ty),
            ty.name()
        );
        s += &format!(
            "static_assert(WS256_SMEM_BYTES({}) == {}, \"gs256 smem of {} differs from matmul.rs\");\n",
            qt(ty),
            ws256_smem_bytes(ty),
            ty.name()
        );
        s += &format!(
            "static_assert(WS256A_SMEM_BYTES({}) == {}, \"gs256a smem of {} differs from matmul.rs\");\n",
            qt(ty),
            ws256a_smem_bytes(ty),
            ty.name()
        );
        for k in [32usize, 512, 2048, 4096, 8192] {
            s += &format!(
                "static_assert(mmv_rows_per_step({}, {k}) == {}, \"mmv rows per step of {} K {k} differs from matmul.rs\");\n",
                qt(ty),
                mmv_rows_per_step(ty, k),
                ty.name()
            );
        }
    }
    s
}

/// Bytes of cuBLAS's own workspace on the cuBLAS path (set explicitly, so a captured graph
/// never has the library allocate).
pub(crate) const CUBLAS_WORKSPACE: usize = 32 << 20;

/// The f16 operand bytes (weight, activations) of a dense projection that takes the cuBLAS path,
/// or None when it runs on the engine's own kernels: F32 weights (the router stays exact) and
/// shapes the operand kernels do not take stay there.
pub(crate) fn cublas_operands(b: &CudaBackend, w: &DevWeight, m: usize) -> Option<(usize, usize)> {
    // A forced kernel variant (an experiment) means the engine's own kernels.
    if b.options.gemm_variant.is_some() {
        return None;
    }
    let min_m = b.options.cublas_min_m?;
    let (k, n) = (*w.dims.first()? as usize, *w.dims.get(1)? as usize);
    let block = w.ty.block_elems();
    let supported = w.ty != GgmlType::F32 && GEMM_TYPES.contains(&w.ty);
    if m < min_m || !supported || k % 8 != 0 || block == 0 || k % block != 0 {
        return None;
    }
    let align = |bytes: usize| bytes.div_ceil(256) * 256;
    Some((align(n * k * 2), align(m * k * 2)))
}

/// Sizes and leading dimensions of the column-major `cublasGemmEx(OP_T, OP_N, ...)` call that
/// computes row-major `Y[m][ldy] = X[m][k] * W'[n][k]^T`: column-major, that is
/// `Y^T (n x m, ld ldy) = op(W') (n x k: W' is k x n column-major, transposed) * X^T (k x m, ld k)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmExDims {
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
}

impl GemmExDims {
    fn row_major(m: usize, n: usize, k: usize, ldy: usize) -> GemmExDims {
        GemmExDims::row_major_ld(m, n, k, k, ldy)
    }
    /// The same with X's rows `ldx` elements apart.
    fn row_major_ld(m: usize, n: usize, k: usize, ldx: usize, ldy: usize) -> GemmExDims {
        GemmExDims {
            m: n as i32,
            n: m as i32,
            k: k as i32,
            lda: k as i32,
            ldb: ldx as i32,
            ldc: ldy as i32,
        }
    }
}

/// Points cuBLAS at `lib_ws` (CUBLAS_WORKSPACE bytes: inside a graph capture it may not
/// allocate), then runs `cublasGemmEx(OP_T, OP_N)` with dims `d`: the weight at `w` and the
/// activations at `x`, both of type `ty`, into f32 `y`, with compute type `compute`.
///
/// # Safety
/// `lib_ws` must address CUBLAS_WORKSPACE bytes of device memory, and `w`, `x` and `y` the
/// operands `d` describes (`d.m x d.k` of `ty` at `w` with leading dimension `d.lda`, `d.k x d.n`
/// at `x` with `d.ldb`, `d.m x d.n` f32 at `y` with `d.ldc`), all live until the call has run on
/// the handle's stream.
unsafe fn gemm_ex_t_n_device(
    handle: cudarc::cublas::sys::cublasHandle_t,
    lib_ws: u64,
    d: GemmExDims,
    (w, x, ty): (u64, u64, cudarc::cublas::sys::cudaDataType),
    y: u64,
    compute: cudarc::cublas::sys::cublasComputeType_t,
) -> Result<(), EngineError> {
    use cudarc::cublas::{result as blas_result, sys as blas};
    let blas_err =
        |what: &str, e: blas_result::CublasError| EngineError::Cuda(format!("{what}: {e:?}"));
    // SAFETY: the caller's contract: lib_ws holds CUBLAS_WORKSPACE bytes.
    unsafe {
        blas::cublasSetWorkspace_v2(handle, lib_ws as *mut std::ffi::c_void, CUBLAS_WORKSPACE)
            .result()
            .map_err(|e| blas_err("cublasSetWorkspace", e))?;
    }
    crate::cuda::launch::count_library_call();
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the operands are the caller's (its contract above); alpha and beta are host f32
    // scalars (the handle's default host pointer mode) alive for the call.
    unsafe {
        blas_result::gemm_ex(
            handle,
            blas::cublasOperation_t::CUBLAS_OP_T,
            blas::cublasOperation_t::CUBLAS_OP_N,
            d.m,
            d.n,
            d.k,
            (&alpha as *const f32).cast(),
            w as *const std::ffi::c_void,
            ty,
            d.lda,
            x as *const std::ffi::c_void,
            ty,
            d.ldb,
            (&beta as *const f32).cast(),
            y as *mut std::ffi::c_void,
            blas::cudaDataType::CUDA_R_32F,
            d.ldc,
            compute,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| blas_err("cublasGemmEx", e))
}

/// The weight facts a projection launch needs, copied out of the backend's weight table (so
/// the backend can be borrowed mutably for the workspace).
#[derive(Clone, Copy)]
struct W {
    ptr: u64,
    ty: GgmlType,
    row_bytes: usize,
    k: usize,
    n: usize,
}

impl W {
    fn of(w: &DevWeight) -> W {
        W {
            ptr: w.buf.ptr,
            ty: w.ty,
            row_bytes: w.row_bytes,
            k: w.dims[0] as usize,
            n: w.dims[1] as usize,
        }
    }
}

/// Workspace bytes of a dense projection: the f16 operands and cuBLAS's own workspace on the
/// cuBLAS path, nothing on the engine's kernels.
pub fn work_bytes(b: &CudaBackend, plan: &Plan, index: usize) -> Result<usize, EngineError> {
    let w = b.weights.of(plan, index, 0)?;
    let node = &plan.nodes[index];
    let m = node.inputs[0].rows;
    if let tally_model::Op::MatMul { layout } = &node.op
        && f32_on_cublas(b, w, m, layout_code(*layout).0)
    {
        return Ok(CUBLAS_WORKSPACE);
    }
    Ok(cublas_operands(b, w, m).map_or(0, |(w, x)| w + x + CUBLAS_WORKSPACE))
}

/// `TALLY_F32_GEMM=cublas`: whether an F32-weight product of M rows (the router of a prompt)
/// runs through cuBLAS's f32 GEMM (`cublas_f32_gemm`) instead of the engine's SIMT GEMM: more
/// than 8 rows (fewer stay on `gemv_f32`), at least 64 output columns, plain layout.
fn f32_on_cublas(b: &CudaBackend, w: &DevWeight, m: usize, layout: i32) -> bool {
    b.options.f32_cublas && f32_cublas_shape(w.ty, &w.dims, w.row_bytes, m, layout)
}

/// The weights and rows `f32_on_cublas` takes (the option aside).
fn f32_cublas_shape(ty: GgmlType, dims: &[u64], row_bytes: usize, m: usize, layout: i32) -> bool {
    ty == GgmlType::F32
        && m > 8
        && layout == 0
        && dims.len() == 2
        && dims[1] >= 64
        && row_bytes == 4 * dims[0] as usize
}

/// What [`CudaBackend`]'s `cast_buf` holds: the f16 copy of input view `view`, cast by node
/// `node` of the run in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CastKey {
    pub view: View,
    pub node: usize,
}

/// Bytes of the backend's `cast_buf` the cuBLAS projections of `plan` need (their largest
/// activation operand).
pub(crate) fn cast_bytes(b: &CudaBackend, plan: &Plan) -> Result<usize, EngineError> {
    let mut most = 0;
    for (index, node) in plan.nodes.iter().enumerate() {
        if matches!(node.op, tally_model::Op::MatMul { .. }) {
            let w = b.weights.of(plan, index, 0)?;
            if let Some((_, x)) = cublas_operands(b, w, node.inputs[0].rows) {
                most = most.max(x);
            }
        }
    }
    Ok(most)
}

/// The cast reuse's bookkeeping in the backend: what `cast_buf` holds and where the run is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CastState {
    /// The f16 copy `cast_buf` holds; None when unknown (a new run or a repeated node,
    /// `prepare`, a host write, a graph launch or capture, a state restore, poisoning).
    pub last: Option<CastKey>,
    /// The last node index dispatched.
    last_dispatch: usize,
}

impl CastState {
    /// What `cast_buf` holds is no longer known.
    pub fn forget(&mut self) {
        self.last = None;
    }
    /// Before node `index` is dispatched: one at or below the last dispatched starts a new run
    /// (or repeats a node), which forgets what `cast_buf` holds.
    pub fn dispatching(&mut self, index: usize) {
        if index <= self.last_dispatch {
            self.last = None;
        }
        self.last_dispatch = index;
    }
    /// After a fused dispatch at `index` that covered `n` nodes, `before` the state before its
    /// `dispatching(index)`: nothing fused undoes that note (the executor then dispatches the
    /// node itself).
    pub fn fused(&mut self, before: CastState, index: usize, n: usize) {
        if n == 0 {
            *self = before;
        } else {
            self.last_dispatch = index + n - 1;
        }
    }
}

/// Whether `cast_buf` already holds the f16 copy of node `index`'s input: made by an earlier
/// node of this run from the same view (a projection's cast of its input, or a norm's copy of
/// its output, [`norm_cast_target`]), which no node after that one and before this one writes.
fn cast_is_current(last: Option<CastKey>, plan: &Plan, index: usize) -> bool {
    let view = plan.nodes[index].inputs[0];
    last.is_some_and(|c| {
        c.view == view
            && c.node < index
            && !plan.nodes[c.node + 1..index]
                .iter()
                .any(|n| n.outputs.iter().any(|o| o.buf == view.buf))
    })
}

/// `TALLY_NORM_CAST=on`: where the fused norm launch ending at node `norm` of `plan`, which
/// writes `view`, may also store the f16 copy of it that a cuBLAS projection after it would
/// cast (norm.cu's `yh`): `cast_buf`, when a projection that reads exactly `view` and takes
/// the cuBLAS path (with its cast in `cast_buf`) comes before any node writes `view`'s buffer.
/// The launch then notes `CastKey { view, node: norm }`, so those projections find the cast
/// current ([`cast_is_current`]) and launch no cast of their own: the same f16 values
/// (round to nearest, as cast_f16_rows), so the same outputs bit for bit.
pub(crate) fn norm_cast_target(
    b: &CudaBackend,
    plan: &Plan,
    norm: usize,
    view: &View,
) -> Option<u64> {
    if !b.options.norm_cast || !b.options.cast_reuse {
        return None;
    }
    let buf = b.cast_buf.as_ref()?;
    for (i, n) in plan.nodes.iter().enumerate().skip(norm + 1) {
        if matches!(n.op, tally_model::Op::MatMul { .. }) && n.inputs.first() == Some(view) {
            let dw = b.weights.of(plan, i, 0).ok()?;
            let whole = dw.dims.len() >= 2 && dw.dims[0] as usize == view.cols;
            if let Some((_, x_bytes)) = cublas_operands(b, dw, view.rows).filter(|_| whole) {
                return (buf.bytes >= x_bytes).then_some(buf.ptr);
            }
        }
        if n.outputs.iter().any(|o| o.buf == view.buf) {
            return None;
        }
    }
    None
}

/// `Op::MatMul`: node `index` of `plan`.
pub fn matmul(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    io: &Io,
    layout: OutLayout,
) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let m = node.inputs[0].rows;
    let dw = b.weights.of(plan, index, 0)?;
    if dw.dims.len() < 2 || dw.buf.bytes < dw.row_bytes * dw.dims[1] as usize {
        return Err(EngineError::Internal(format!(
            "projection weight {} of dims {:?} in {} bytes",
            dw.name, dw.dims, dw.buf.bytes
        )));
    }
    let w = W::of(dw);
    let shape = (w.ptr, w.row_bytes, w.n, w.k);
    let plain = layout == OutLayout::Plain;
    if super::router::runs_router_gemv(b, w.ty, shape, io.ins[0], m, plain) {
        // The router of a token or a few (router_fused's GEMV; ops/fused.rs runs it with its
        // top-k).
        return super::router::router_gemv(b, shape, m, io.ins[0], io.outs[0], None);
    }
    let operands = cublas_operands(b, dw, m);
    let name = dw.name.clone();
    let layout = layout_code(layout);
    if f32_on_cublas(b, dw, m, layout.0) {
        return cublas_f32_gemm(b, w, m, io.ins[0], io.outs[0]);
    }
    match operands {
        Some(operands) => {
            let cast = Cast { plan, index };
            cublas_gemm(b, w, m, io.ins[0], io.outs[0], layout, operands, cast)
        }
        None => dense_gemm(b, &name, w, m, io.ins[0], io.outs[0], layout),
    }
}

/// Device memory left free after the f16 copies of [`keep_f16`] (the KV cache and workspace of
/// long prompts grow after it).
const F16_KEEP_RESERVE: usize = 16 << 30;

/// The cuBLAS path's f16 weights, decoded once (`CudaOptions::f16_keep`): for every dense
/// projection of `plan` that takes that path, an f16 copy of its weight (in the node's output
/// layout), made now, outside any graph capture, while the device keeps F16_KEEP_RESERVE free
/// after it; `cublas_gemm` then reads the copy instead of decoding the weight into the workspace
/// at every call (dequant_f16 was 2.35 of the 44.6 ms of device time of a 512-token prefill of
/// the 35B model, docs/results/2026-12-04-h200-wgx/profile). A weight without a copy (no room)
/// is decoded per call as before.
pub(crate) fn keep_f16(b: &mut CudaBackend, plan: &Plan) -> Result<(), EngineError> {
    if !b.options.f16_keep {
        return Ok(());
    }
    // Device memory free now, less what the copies below take (one query, not one per weight).
    let (used, total) = b.memory_use();
    let mut free = total.saturating_sub(used) as usize;
    for (index, node) in plan.nodes.iter().enumerate() {
        if let tally_model::Op::MoeMatMul { k, .. } = &node.op {
            keep_expert_f16(b, plan, index, node.inputs[1].rows * k, &mut free)?;
            continue;
        }
        let tally_model::Op::MatMul { layout } = &node.op else {
            continue;
        };
        let dw = b.weights.of(plan, index, 0)?;
        // A short buffer is left to `matmul`, which reports it.
        if dw.dims.len() < 2
            || dw.buf.bytes < dw.row_bytes * dw.dims[1] as usize
            || cublas_operands(b, dw, node.inputs[0].rows).is_none()
        {
            continue;
        }
        let (w, code) = (W::of(dw), layout_code(*layout));
        let key = (w.ptr, code);
        if b.f16_weights.contains_key(&key) {
            continue;
        }
        let bytes = 2 * w.n * w.k;
        if free < bytes + F16_KEEP_RESERVE {
            continue;
        }
        free -= bytes;
        let buf = DevBuf::alloc(bytes, "an f16 copy of a dense weight")?;
        dequant_f16_into(b, w, code, buf.ptr)?;
        b.f16_weights.insert(key, buf);
    }
    Ok(())
}

/// Rows of an expert copy one `dequant_f16` launch decodes (its grid.y, at most 65,535).
const EXPERT_F16_SLICE: usize = 32768;

/// `TALLY_EXPERT_F16`: the f16 copy of the expert weights of MoE node `index` (`pairs` (token,
/// expert) pairs), made now when `moe::expert_f16_wanted` and the device keeps
/// F16_KEEP_RESERVE free after it; `moe::expert_source` then points the node's tiles at it.
fn keep_expert_f16(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    pairs: usize,
    free: &mut usize,
) -> Result<(), EngineError> {
    if !b.options.expert_f16 {
        return Ok(());
    }
    let dw = b.weights.of(plan, index, 0)?;
    if !super::moe::expert_f16_wanted(dw, pairs) || b.f16_experts.contains_key(&dw.buf.ptr) {
        return Ok(());
    }
    let (k, rows) = (dw.dims[0] as usize, (dw.dims[1] * dw.dims[2]) as usize);
    // A short buffer is left to the node, which reports it.
    if dw.buf.bytes < dw.row_bytes * rows {
        return Ok(());
    }
    let bytes = 2 * rows * k;
    if *free < bytes + F16_KEEP_RESERVE {
        return Ok(());
    }
    *free -= bytes;
    let (key, ty, row_bytes) = (dw.buf.ptr, dw.ty, dw.row_bytes);
    let buf = DevBuf::alloc(bytes, "an f16 copy of expert weights")?;
    // The E blocks of N rows as one [E * N, K] weight in storage order (layout 0), decoded in
    // slices of EXPERT_F16_SLICE rows (dequant_f16's grid.y is the row).
    for r0 in (0..rows).step_by(EXPERT_F16_SLICE) {
        let w = W {
            ptr: key + (r0 * row_bytes) as u64,
            ty,
            row_bytes,
            k,
            n: EXPERT_F16_SLICE.min(rows - r0),
        };
        dequant_f16_into(b, w, (0, 0, 0), buf.ptr + (2 * r0 * k) as u64)?;
    }
    b.f16_experts.insert(key, buf);
    Ok(())
}

/// Decodes weight `w` to f16 `[N][K]` at `out` (rows in output order for layout 1).
fn dequant_f16_into(
    b: &CudaBackend,
    w: W,
    (layout, head_dim, n_head): (i32, i32, i32),
    out: u64,
) -> Result<(), EngineError> {
    let dq = DequantF16Args {
        w: w.ptr,
        row_bytes: w.row_bytes as i64,
        ty: qt(w.ty),
        k: w.k as i32,
        n: w.n as i32,
        out,
        layout,
        head_dim,
        n_head,
    };
    // SAFETY: DequantF16Args mirrors gemm.cu's struct (layout asserted at kernel build). Grid
    // (K / 2048 blocks, N rows): it reads N rows of row_bytes of the device weight (its size
    // checked by the callers) and writes N x K f16 at `out`, which the callers sized
    // (>= 2*N*K bytes: a kept copy or the workspace cublas_operands sized).
    unsafe {
        launch(
            b.kernels.dequant_f16,
            (blocks(w.k as i64, 2048), w.n as u32, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &dq,
        )
    }
}

/// The node a cuBLAS projection runs for (its input view keys the cast's reuse).
struct Cast<'p> {
    plan: &'p Plan,
    index: usize,
}

/// A dense projection through cuBLAS: the weight dequantised once to f16 (rows already in
/// output order for layout 1), the activations rounded to f16, then `cublasGemmEx` with f32
/// accumulation and output: the precision of the engine's tensor-core kernels, each weight
/// element decoded once instead of once per M tile. The activations are cast into the backend's
/// `cast_buf` where it is large enough, and not again by the next projections of the same input
/// (`cast_is_current`: the same f16 values, so the same outputs bit for bit).
#[allow(clippy::too_many_arguments)]
fn cublas_gemm(
    b: &mut CudaBackend,
    w: W,
    m: usize,
    x: (u64, i64),
    y: (u64, i64),
    (layout, head_dim, n_head): (i32, i32, i32),
    (w_bytes, x_bytes): (usize, usize),
    node: Cast<'_>,
) -> Result<(), EngineError> {
    use cudarc::cublas::sys as blas;
    let (k, n) = (w.k, w.n);
    let handle = b.blas_handle()?;
    let ws = b.workspace(w_bytes + x_bytes + CUBLAS_WORKSPACE)?;
    let (mut wh, mut xh, lib_ws) = (ws, ws + w_bytes as u64, ws + (w_bytes + x_bytes) as u64);
    let mut cast_needed = true;
    // What cast_buf will hold once this projection's cast (if any) is on the stream.
    let mut holds = None;
    if let Some(buf) = b.cast_buf.as_ref().filter(|buf| buf.bytes >= x_bytes) {
        xh = buf.ptr;
        cast_needed = !b.options.cast_reuse || !cast_is_current(b.cast.last, node.plan, node.index);
        holds = Some(CastKey {
            view: node.plan.nodes[node.index].inputs[0],
            node: node.index,
        });
    }
    // Unknown until the cast below is launched (an error on the way leaves it unknown).
    if holds.is_some() && cast_needed {
        b.cast.forget();
    }
    let s = b.cu_stream();
    let gx = blocks(k as i64, 2048);
    let code = (layout, head_dim, n_head);
    match b.f16_weights.get(&(w.ptr, code)) {
        // The copy keep_f16 made (2*N*K bytes, this weight in this layout).
        Some(kept) => wh = kept.ptr,
        None => dequant_f16_into(b, w, code, wh)?,
    }
    let cast = CastF16Args {
        x: x.0,
        ldx: x.1,
        m: m as i32,
        k: k as i32,
        out: xh,
    };
    if cast_needed {
        // SAFETY: CastF16Args mirrors gemm.cu's struct (layout asserted at kernel build). Grid
        // (K / 2048, M rows): it reads the node's M x K input view and writes M x K f16 into
        // `xh`: x_bytes >= 2*M*K of the workspace after `wh`, or of cast_buf (checked above).
        unsafe {
            launch(
                b.kernels.cast_f16_rows,
                (gx, m as u32, 1),
                (256, 1, 1),
                0,
                s,
                &cast,
            )
        }?;
    }
    if holds.is_some() {
        b.cast.last = holds;
    }
    let d = GemmExDims::row_major(m, n, k, y.1 as usize);
    // SAFETY: lib_ws is CUBLAS_WORKSPACE bytes of the backend's workspace (sized above and by
    // prepare() for every node; it lives until the next growth); wh holds n*k and xh m*k f16
    // values written above on the same stream (or kept: the weight's copy, the cast of this
    // input); y.0 holds m rows of stride ldy >= n f32 values (the plan's output view).
    unsafe {
        gemm_ex_t_n_device(
            handle,
            lib_ws,
            d,
            (wh, xh, blas::cudaDataType::CUDA_R_16F),
            y.0,
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    }
}

/// Row-major `Y[m][ldy] = X[m][ldx] * W[n][k]^T` of an F32 weight (`f32_on_cublas`: the default
/// for the routers of prompts) through `cublasGemmEx` with f32 operands read in place and
/// `CUBLAS_COMPUTE_32F_PEDANTIC` (f32 products and sums, never tf32): exact to f32 as the SIMT
/// GEMM is (another order of the sums).
fn cublas_f32_gemm(
    b: &mut CudaBackend,
    w: W,
    m: usize,
    x: (u64, i64),
    y: (u64, i64),
) -> Result<(), EngineError> {
    use cudarc::cublas::sys as blas;
    let handle = b.blas_handle()?;
    let lib_ws = b.workspace(CUBLAS_WORKSPACE)?;
    let d = GemmExDims::row_major_ld(m, w.n, w.k, x.1 as usize, y.1 as usize);
    // SAFETY: lib_ws is CUBLAS_WORKSPACE bytes of the backend's workspace (work_bytes sized it
    // for this node); w.ptr holds n rows of k f32 (row_bytes = 4k, checked by f32_on_cublas;
    // the buffer's size by `matmul`); x.0 holds m rows of stride ldx >= k f32 and y.0 m rows of
    // stride ldy >= n f32 (the plan's views): column-major, Y^T (n x m, ld ldy) = op T of the
    // k x n weight (ld k) times X^T (k x m, ld ldx).
    unsafe {
        gemm_ex_t_n_device(
            handle,
            lib_ws,
            d,
            (w.ptr, x.0, blas::cudaDataType::CUDA_R_32F),
            y.0,
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
        )
    }
}

/// Whether the dense projection of node `index` (M rows) runs on `gemv_<t>` (what the paired
/// gate/up launch of `fused.rs` replaces, bit for bit): not cuBLAS, not the SIMT GEMM, not
/// mmv, not a tensor-core tile, plain layout.
pub(crate) fn runs_gemv(b: &CudaBackend, w: &DevWeight, m: usize) -> Result<bool, EngineError> {
    if w.dims.len() < 2 || cublas_operands(b, w, m).is_some() {
        return Ok(false);
    }
    let (k, n) = (w.dims[0] as usize, w.dims[1] as usize);
    if (w.ty == GgmlType::F32 && m > 8) || use_mmv(w.ty, k) {
        return Ok(false);
    }
    Ok(dense_variant(m, n, k, b.props.sm_count, b.options.gemm_variant)? == 3)
}

/// The grid width of the dense projection of node weight `w` (M rows) when it runs on `mmv_<t>`
/// (what the down pair of `fused.rs` replaces, bit for bit): not cuBLAS, not the SIMT GEMM, the
/// GEMV variant with mmv's K; None otherwise.
pub(crate) fn runs_mmv(
    b: &CudaBackend,
    w: &DevWeight,
    m: usize,
) -> Result<Option<u32>, EngineError> {
    if w.dims.len() != 2 || cublas_operands(b, w, m).is_some() {
        return Ok(None);
    }
    let (k, n) = (w.dims[0] as usize, w.dims[1] as usize);
    if (w.ty == GgmlType::F32 && m > 8) || !use_mmv(w.ty, k) {
        return Ok(None);
    }
    let v = dense_variant(m, n, k, b.props.sm_count, b.options.gemm_variant)?;
    Ok((v == 3).then(|| dense_mmv_grid_x(b, w.ty, n, k)))
}

/// grid.x of a dense `mmv_<t>` launch: every row step, at most four blocks per multiprocessor.
fn dense_mmv_grid_x(b: &CudaBackend, ty: GgmlType, n: usize, k: usize) -> u32 {
    mmv_grid_x(ty, n, k, 4 * b.props.sm_count)
}

/// A dense projection on the engine's kernels. F32 weights (the MoE router) with more than 8
/// rows that `f32_on_cublas` does not take (`TALLY_F32_GEMM=simt`, other shapes) run on the f32
/// SIMT GEMM: exact to f32 like the CPU reference, so near-tied experts are picked the same way
/// (the tensor-core kernels round operands to f16); up to 8 rows, `gemv_f32` (also f32).
fn dense_gemm(
    b: &CudaBackend,
    name: &str,
    w: W,
    m: usize,
    x: (u64, i64),
    y: (u64, i64),
    (layout, head_dim, n_head): (i32, i32, i32),
) -> Result<(), EngineError> {
    let s = b.cu_stream();
    let (k, n, ty) = (w.k, w.n, w.ty);
    let set = b.kernels.gemm_set(ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} weights ({name})", ty.name()))
    })?;
    let a = GemmArgs::dense(
        (w.ptr, w.row_bytes as i64),
        x,
        y,
        (m, n, k),
        (layout, head_dim, n_head),
    );
    if ty == GgmlType::F32 && m > 8 {
        let simt = simt_variant(m, n, b.props.sm_count, b.options.f32_tf32);
        let tile = simt.tile() as u32;
        let grid = (blocks(n as i64, tile), blocks(m as i64, tile), 1);
        // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). The grid
        // tiles N x M in the tile the kernel was built with (consts.rs); it reads the node's
        // M x K input view and the N x K f32 weight (size checked in `matmul`) and writes the
        // M x N output view, dense (null MoE tables).
        return unsafe {
            launch(
                simt.kernel(&b.kernels),
                grid,
                (SIMT_THREADS, 1, 1),
                0,
                s,
                &a,
            )
        };
    }
    let v = dense_variant(m, n, k, b.props.sm_count, b.options.gemm_variant)?;
    if v == 3 && use_mmv(ty, k) {
        let gx = dense_mmv_grid_x(b, ty, n, k);
        let f = mmv_kernel(b, set, ty, k, false);
        // SAFETY: as for the SIMT GEMM, with grid (row steps, M): the kernel's grid-stride loop
        // keeps every block inside the N rows, and use_mmv checked K / 32 <= MMV_THREADS.
        return unsafe { launch(f, (gx, m as u32, 1), (MMV_THREADS, 1, 1), 0, s, &a) };
    }
    if v == 3 && use_gemvr(b, ty, m, n, k) {
        if let Some((i, grid, threads, smem)) = gemvt_launch(
            b.options.gemvt,
            a.w,
            m,
            n,
            k,
            a.w_row_bytes as usize,
            b.props.sm_count,
        ) {
            // SAFETY: as for gemvr below (dense, M <= the kernel's rows, K <= GEMVR_K_MAX, an
            // integer format), with GEMV_THREADS threads (the launch bound) and gemm.cu's shared
            // memory for (K, row bytes, warps), at most SMEM_OPT_IN_MAX (configure raised the
            // kernel's limit to that); w and the rows are whole 16-byte vectors (checked by
            // gemvt_launch; the kernel also checks and writes nothing otherwise). Its
            // warps walk their row groups grid-stride inside N (the last group's copy takes only
            // the rows that exist).
            return unsafe { launch(set.gemvt[i], (grid, 1, 1), (threads, 1, 1), smem, s, &a) };
        }
        let (grid, threads) = gemvr_grid(n, m, b.props.sm_count);
        let f = set.gemvr[usize::from(m > 1)];
        // SAFETY: as for the SIMT GEMM, dense, with at most GEMV_THREADS threads (the kernel's
        // launch bound); use_gemvr checked an integer format, K <= GEMVR_K_MAX and M <= the
        // kernel's rows (1 or GEMVR_MAX_M), and the dynamic shared memory is gemm.cu's size
        // for (K, M), at most 40 KB (no opt-in needed). Blocks walk their row groups
        // grid-stride inside N (the last group's rows are clamped, stores checked).
        return unsafe {
            launch(
                f,
                (grid, 1, 1),
                (threads, 1, 1),
                gemvr_smem_bytes(k, m),
                s,
                &a,
            )
        };
    }
    if v == 3 {
        let rw = if use_gemvi(b, ty, k) {
            2
        } else {
            gemv_rows_per_warp(b, n)
        };
        if rw == 4 {
            let (gx, threads) = gemv_grid(n, 4, m, b.props.sm_count, gemv_min_threads(ty, k, 4));
            let grid = (gx, m as u32, 1);
            // SAFETY: as for the SIMT GEMM, with 4 output columns per warp over M rows and at
            // most GEMV_THREADS threads (the kernel's launch bound).
            return unsafe { launch(set.gemv4, grid, (threads, 1, 1), 0, s, &a) };
        }
        let (gx, threads) = gemv_grid(n, 2, m, b.props.sm_count, gemv_min_threads(ty, k, 2));
        let grid = (gx, m as u32, 1);
        let f = gemv2_kernel(b, set, ty, k);
        // SAFETY: as for the SIMT GEMM, with 2 output columns per warp over M rows and at most
        // GEMV_THREADS threads (the kernel's launch bound; gemvi_<t>'s is the same block size).
        unsafe { launch(f, grid, (threads, 1, 1), 0, s, &a) }
    } else {
        let bm = TILE_BM[v];
        let grid = (
            blocks(n as i64, GEMM_BN as u32),
            blocks(m as i64, bm as u32),
            1,
        );
        // SAFETY: as for the SIMT GEMM, with GEMM_BN x BM tiles; dense_variant checked
        // K % GEMM_BK == 0, and the dynamic shared memory is gemm.cu's own size for (type, BM)
        // (asserted at kernel build), which `configure` raised the kernel's limit to.
        unsafe {
            launch(
                set.tiles[v],
                grid,
                (GEMM_THREADS, 1, 1),
                gemm_smem_bytes(ty, bm),
                s,
                &a,
            )
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The warp-specialised tile's shared memory, by hand from gemm_wg.cuh's layout: 1024
    /// bytes of slack, four x stages and one A stage of 2 x 128 rows x 128 bytes, the row
    /// tables, three ring stages of 256 decoder threads x two 32-byte slots (Q4_K): 215,040
    /// bytes; the 48-byte slots (Q5_K, Q8_0) would need 239,616, over sm_90's 232,448.
    #[test]
    fn the_warp_specialised_tile_fits_only_the_small_slots() {
        let q4k = 1024 + 4 * 32_768 + 32_768 + 1024 + 3 * 256 * 2 * 32;
        assert_eq!(ws_smem_if_fits(GgmlType::Q4_K), Some(q4k));
        assert_eq!(ws_smem_if_fits(GgmlType::IQ4_XS), Some(q4k));
        assert_eq!(ws_smem_if_fits(GgmlType::MXFP4), Some(q4k));
        for ty in [
            GgmlType::Q5_K,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
            GgmlType::F16,
        ] {
            assert_eq!(ws_smem_if_fits(ty), None, "{ty:?}");
        }
    }

    /// A cuBLAS projection reuses the f16 copy of its input only where an earlier projection of
    /// this run cast the same view and nothing since wrote that buffer: in a prefill the
    /// projections of one normed input (qkv, z, beta, alpha; the shared expert's gate and up)
    /// share one cast; the next layer's projections of the same buffer, rewritten by its norm
    /// in between, do not; nor the node itself again, nor another view.
    #[test]
    fn a_cast_is_reused_only_while_its_input_is_unwritten() {
        use tally_model::synth::Preset;
        use tally_model::{Op, PlanOptions, build_plan};
        let cfg = Preset::Mid.config();
        let plan = build_plan(&cfg, 300, 512, &PlanOptions::default()).expect("plan");
        let mms: Vec<usize> = (0..plan.nodes.len())
            .filter(|&i| matches!(plan.nodes[i].op, Op::MatMul { .. }))
            .collect();
        let key = |i: usize| {
            Some(CastKey {
                view: plan.nodes[i].inputs[0],
                node: i,
            })
        };
        let (mut shared, mut rewritten) = (0, 0);
        for (a, &i) in mms.iter().enumerate() {
            assert!(!cast_is_current(key(i), &plan, i), "a node after itself");
            assert!(!cast_is_current(None, &plan, i));
            for &j in &mms[a + 1..] {
                let same = plan.nodes[j].inputs[0] == plan.nodes[i].inputs[0];
                let written = plan.nodes[i..j].iter().any(|n| {
                    n.outputs
                        .iter()
                        .any(|o| o.buf == plan.nodes[i].inputs[0].buf)
                });
                assert_eq!(cast_is_current(key(i), &plan, j), same && !written);
                assert!(!cast_is_current(key(j), &plan, i), "a later node's cast");
                shared += usize::from(same && !written);
                rewritten += usize::from(same && written);
            }
        }
        // Per linear-attention layer qkv, z, beta and alpha read one norm (6 pairs); per layer
        // the shared gate and up (1); the same buffers again in later layers, rewritten.
        let linear = cfg
            .layers
            .iter()
            .filter(|k| matches!(k, tally_model::LayerKind::Linear))
            .count();
        assert!(linear > 0 && linear < cfg.n_layers);
        assert!(shared >= 6 * linear + cfg.n_layers, "{shared} shared casts");
        assert!(
            rewritten > 0,
            "no input was rewritten between its projections"
        );
    }

    /// The dispatch bookkeeping: a later node of the same run keeps what cast_buf holds; a new
    /// run, a repeated node and a node inside a fused dispatch's range forget it; a fused
    /// dispatch that fused nothing leaves the state as it was.
    #[test]
    fn the_cast_state_forgets_at_every_new_run_or_repeat() {
        use tally_model::synth::Preset;
        use tally_model::{Op, PlanOptions, build_plan};
        let plan =
            build_plan(&Preset::Mid.config(), 300, 512, &PlanOptions::default()).expect("plan");
        let mms: Vec<usize> = (0..plan.nodes.len())
            .filter(|&i| matches!(plan.nodes[i].op, Op::MatMul { .. }))
            .collect();
        let (i, j) = mms
            .windows(2)
            .map(|w| (w[0], w[1]))
            .find(|&(i, j)| plan.nodes[i].inputs[0] == plan.nodes[j].inputs[0])
            .expect("two projections of one input");
        let key = CastKey {
            view: plan.nodes[i].inputs[0],
            node: i,
        };
        let run_to_i = || {
            let mut s = CastState::default();
            for n in 0..=i {
                s.dispatching(n);
            }
            s.last = Some(key);
            s
        };
        // The same run: j reuses i's cast.
        let mut s = run_to_i();
        s.dispatching(j);
        assert!(cast_is_current(s.last, &plan, j));
        // A new run starts at node 0.
        let mut s = run_to_i();
        s.dispatching(0);
        assert_eq!(s.last, None);
        // A repeated node (the ledger's replays, standalone timing).
        let mut s = run_to_i();
        s.dispatching(i);
        assert_eq!(s.last, None);
        // A fused dispatch that fused nothing changes nothing.
        let mut s = run_to_i();
        let before = s;
        s.dispatching(i + 1);
        s.fused(before, i + 1, 0);
        assert_eq!(s, before);
        // One that covered three nodes: a dispatch inside its range is a repeat.
        let mut s = run_to_i();
        let before = s;
        s.dispatching(i + 1);
        s.fused(before, i + 1, 3);
        assert_eq!(s.last, Some(key));
        s.dispatching(i + 2);
        assert_eq!(s.last, None);
        let mut s = run_to_i();
        s.dispatching(i + 1);
        s.fused(before, i + 1, 3);
        s.dispatching(i + 4);
        assert_eq!(
            s.last,
            Some(key),
            "the node after the fused range continues the run"
        );
        s.forget();
        assert_eq!(s.last, None);
    }

    /// The cuBLAS f32 GEMM takes the router of a prompt on the 35B shapes and on the mid preset
    /// (64 experts: what the GPU scripts' `tally check` runs), not a verification's (8 rows and
    /// fewer stay on gemv_f32), a one-column gate, another layout or a quantised weight.
    #[test]
    fn the_f32_cublas_path_takes_the_prompt_routers() {
        use tally_model::synth::Preset;
        for (preset, m) in [(Preset::Mid, 1000), (Preset::Mid, 9)] {
            let cfg = preset.config();
            let (k, n) = (cfg.hidden as u64, cfg.n_experts as u64);
            assert!(
                f32_cublas_shape(GgmlType::F32, &[k, n], 4 * k as usize, m, 0),
                "{m}"
            );
        }
        assert!(f32_cublas_shape(GgmlType::F32, &[2048, 256], 8192, 8192, 0));
        assert!(!f32_cublas_shape(GgmlType::F32, &[2048, 256], 8192, 8, 0));
        assert!(!f32_cublas_shape(GgmlType::F32, &[2048, 1], 8192, 512, 0));
        assert!(!f32_cublas_shape(GgmlType::F32, &[2048, 256], 8192, 512, 1));
        assert!(!f32_cublas_shape(
            GgmlType::Q8_0,
            &[2048, 256],
            2176,
            512,
            0
        ));
        assert!(!f32_cublas_shape(
            GgmlType::F32,
            &[2048, 256, 4],
            8192,
            512,
            0
        ));
        // Rows padded past 4 K bytes.
        assert!(!f32_cublas_shape(GgmlType::F32, &[2048, 256], 8196, 512, 0));
    }

    /// The grids the decode GEMVs launched with on the H200 (132 SMs), as ncu recorded them in
    /// docs/results/2026-12-02-h200-decode/ (round5 `after/`, `round6/`): (grid.x, threads).
    #[test]
    fn gemv_grids_are_the_measured_ones() {
        let sms = 132;
        // gemv_<t> (round 5): qkv, 8192 rows; the out projection, 2048 rows.
        // (The f32 body's grids: no floor on the block size.)
        let f = 64;
        assert_eq!(gemv_grid(8192, 2, 1, sms, f), (512, 256));
        assert_eq!(gemv_grid(2048, 2, 1, sms, f), (512, 64));
        // gemv4_<t>: qkv (round 6: grid 512, 128 threads), z (256 at 64 threads).
        assert_eq!(gemv_grid(8192, 4, 1, sms, f), (512, 128));
        assert_eq!(gemv_grid(4096, 4, 1, sms, f), (512, 64));
        // Paired: MoE gate/up (64 x 8 tiles, 256 threads), shared expert (256), beta/alpha (16).
        assert_eq!(gemv_grid(512, 1, 8, sms, f), (64, 256));
        assert_eq!(gemv_grid(512, 1, 1, sms, f), (256, 64));
        assert_eq!(gemv_grid(32, 1, 1, sms, f), (16, 64));
    }

    /// The bulk-fed GEMV's kernel, grid and shared memory: where its ring fits, and not where
    /// it does not.
    #[test]
    fn gemvt_launches_where_the_ring_fits() {
        const W: u64 = 0x7f00_0000_0000; // a device address on a 16-byte boundary
        // The Q6_K head (K 2,048, 1,680-byte rows): 4 rows a warp, one 166.6 KB block an SM;
        // 2 rows a warp, two 86 KB blocks.
        assert_eq!(
            gemvt_smem_bytes(2048, 1680, 256, 4, 1),
            5120 + 192 + 161_280 + 16
        );
        assert_eq!(
            gemvt_launch(4, W, 1, 248_320, 2048, 1680, 132),
            Some((0, 132, 256, 166_608))
        );
        assert_eq!(
            gemvt_launch(2, W, 1, 248_320, 2048, 1680, 132),
            Some((1, 264, 256, 85_968))
        );
        // A verification batch's rows (2 to 4) take gemvt4 at 2 weight rows a warp, whichever
        // one-row kernel is asked for; their x rows add 5 KB each.
        for g in [4, 2] {
            assert_eq!(
                gemvt_launch(g, W, 4, 248_320, 2048, 1680, 132),
                Some((2, 264, 256, 101_328))
            );
        }
        // Q8_0's 2,176-byte rows still fit at 4 rows; a short N takes one block a row group.
        assert_eq!(
            gemvt_launch(4, W, 1, 248_320, 2048, 2176, 132),
            Some((0, 132, 256, 214_224))
        );
        assert_eq!(
            gemvt_launch(2, W, 1, 100, 2048, 1680, 132),
            Some((1, 7, 256, 85_968))
        );
        // Off, no rows, rows that are not whole 16-byte vectors, rings that do not fit: none.
        assert_eq!(gemvt_launch(0, W, 1, 248_320, 2048, 1680, 132), None);
        assert_eq!(gemvt_launch(4, W, 0, 248_320, 2048, 1680, 132), None);
        assert_eq!(gemvt_launch(4, W, 1, 248_320, 2048, 1682, 132), None);
        assert_eq!(gemvt_launch(4, W, 1, 248_320, 4096, 3360, 132), None);
        // Weights that do not start on a 16-byte boundary stay on gemvr.
        assert_eq!(gemvt_launch(4, W + 8, 1, 248_320, 2048, 1680, 132), None);
    }

    /// The persistent multi-row GEMV's grids and shared memory on the H200 (132 SMs): the head
    /// at one row in 264 blocks of 256 threads (each walks ~29 of its 7,760 row groups), and at
    /// 4 rows (2 a warp) in as many; short N get small blocks (the kernel takes any N, the
    /// engine sends it N >= 8192 only).
    #[test]
    fn gemvr_grids_and_shared_memory() {
        assert_eq!(gemvr_grid(248320, 1, 132), (264, 256));
        assert_eq!(gemvr_grid(248320, 4, 132), (264, 256));
        assert_eq!(gemvr_grid(2048, 4, 132), (512, 64));
        assert_eq!(gemvr_grid(30, 2, 132), (8, 64));
        assert_eq!(gemvr_smem_bytes(2048, 1), 5120);
        // The largest: four rows of GEMVR_K_MAX, under the 48 KB that needs no opt-in.
        assert_eq!(gemvr_smem_bytes(GEMVR_K_MAX as usize, GEMVR_MAX_M), 40960);
    }

    /// The integer body's floor: 16 weight rows a block (8 warps at 2 rows a warp, 4 at 4);
    /// the float formats and rows longer than GEMV_QK_MAX keep 64.
    #[test]
    fn integer_gemv_blocks_cover_sixteen_weight_rows() {
        let sms = 132;
        assert_eq!(gemv_min_threads(GgmlType::Q4_K, 4096, 2), 256);
        assert_eq!(gemv_min_threads(GgmlType::IQ4_XS, 2048, 4), 128);
        assert_eq!(gemv_min_threads(GgmlType::Q6_K, 2048, 2), 256);
        assert_eq!(gemv_min_threads(GgmlType::BF16, 2048, 2), 64);
        assert_eq!(gemv_min_threads(GgmlType::Q8_0, 16384, 2), 64);
        // The out projection (2048 rows, K = 4096) and the shared expert (paired, 512 columns).
        let t = gemv_min_threads(GgmlType::Q4_K, 4096, 2);
        assert_eq!(gemv_grid(2048, 2, 1, sms, t), (128, 256));
        assert_eq!(gemv_grid(512, 1, 1, sms, t), (64, 256));
        // qkv at 4 rows a warp keeps its 128-thread blocks.
        let t4 = gemv_min_threads(GgmlType::Q4_K, 2048, 4);
        assert_eq!(gemv_grid(8192, 4, 1, sms, t4), (512, 128));
    }

    /// cuBLAS's definition of `C = op(A) op(B)` with op(A) = A^T and op(B) = B, column-major.
    fn gemm_ex_t_n(d: GemmExDims, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (d.m as usize, d.n as usize, d.k as usize);
        let (lda, ldb, ldc) = (d.lda as usize, d.ldb as usize, d.ldc as usize);
        for j in 0..n {
            for i in 0..m {
                // op(A)(i, l) = A(l, i) = a[l + i * lda]; op(B)(l, j) = b[l + j * ldb].
                c[i + j * ldc] = (0..k).map(|l| a[l + i * lda] * b[l + j * ldb]).sum();
            }
        }
    }

    /// The cuBLAS arguments give row-major `Y = X W^T`, with X contiguous (the f16 cast) and
    /// with X's rows further apart than K (the f32 router reads its input view in place).
    #[test]
    fn cublas_arguments_give_the_row_major_projection() {
        let (m, n, k, ldy) = (3usize, 5usize, 4usize, 7usize);
        for ldx in [k, 6] {
            let x: Vec<f32> = (0..m * ldx).map(|i| (i as f32 * 0.37).sin()).collect();
            let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.53).cos()).collect();
            let mut y = vec![f32::NAN; m * ldy];
            let d = if ldx == k {
                GemmExDims::row_major(m, n, k, ldy)
            } else {
                GemmExDims::row_major_ld(m, n, k, ldx, ldy)
            };
            gemm_ex_t_n(d, &w, &x, &mut y);
            for r in 0..m {
                for c in 0..ldy {
                    let got = y[r * ldy + c];
                    if c < n {
                        let want: f32 = (0..k).map(|l| x[r * ldx + l] * w[c * k + l]).sum();
                        assert!(
                            (got - want).abs() < 1e-6,
                            "ldx {ldx}: y[{r}][{c}] = {got}, want {want}"
                        );
                    } else {
                        assert!(got.is_nan(), "padding y[{r}][{c}] written");
                    }
                }
            }
        }
    }

    #[test]
    fn a_forced_tile_on_a_k_it_cannot_run_is_an_error() {
        // K = 96: only the GEMV runs it; forcing a tensor-core tile used to leave y stale.
        for v in 0..3 {
            let e = dense_variant(512, 256, 96, 132, Some(v)).expect_err("rejected");
            assert!(e.to_string().contains("K % 64"), "{e}");
        }
        assert_eq!(dense_variant(512, 256, 96, 132, Some(3)).ok(), Some(3));
        assert_eq!(dense_variant(512, 256, 128, 132, Some(1)).ok(), Some(1));
        assert_eq!(dense_variant(512, 256, 96, 132, None).ok(), Some(3));
    }

    #[test]
    fn simt_variant_gives_every_sm_a_block() {
        // Router shapes (N = 256) on 132 SMs: 64 x 64 tiles from 4 x 33 blocks on.
        assert_eq!(simt_variant(8192, 256, 132, false), Simt::Tile64);
        assert_eq!(simt_variant(4096, 256, 132, false), Simt::Tile64);
        assert_eq!(simt_variant(2112, 256, 132, false), Simt::Tile64);
        assert_eq!(simt_variant(2048, 256, 132, false), Simt::Tile32);
        assert_eq!(simt_variant(512, 256, 132, false), Simt::Tile32);
        assert_eq!(simt_variant(100, 8, 132, false), Simt::Tile32);
        assert_eq!((Simt::Tile64.tile(), Simt::Tile32.tile()), (64, 32));
        // 3xTF32 on the same tiles.
        assert_eq!(simt_variant(8192, 256, 132, true), Simt::Tf32);
        assert_eq!(simt_variant(512, 256, 132, true), Simt::Tf32M32);
        assert_eq!((Simt::Tf32.tile(), Simt::Tf32M32.tile()), (64, 32));
    }
}
