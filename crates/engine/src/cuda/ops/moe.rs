//! Routed experts (reference `cpu/ops/moe.rs`): for `Op::MoeMatMul`, `moe_route`
//! (`kernels/moe.cu`) groups the (token, expert) pairs by expert into tiles, then the GEMM of the
//! weight type (`kernels/gemm.cu`) runs them; `Op::MoeCombine` is `moe_combine` (`kernels/moe.cu`).

use tally_gguf::GgmlType;
use tally_model::{Node, Plan};

use super::Io;
use super::matmul::{
    MoeTiles, SWAP_BT, TILE_BM, WGX_K_MAX, WgTile, gemm_smem_bytes, gemv_grid, gemv_min_threads,
    gemv2_kernel, mmv_grid_x, mmv_kernel, swap_smem_bytes, use_mmv, use_swap, wg_tile,
};
use crate::EngineError;
use crate::cuda::args::{CombineArgs, GemmArgs, MoeRouteArgs, XPermArgs};
use crate::cuda::consts::{
    GEMM_BK, GEMM_BN, GEMM_THREADS, MMV_THREADS, MOE_ROUTE_MAX_E, MOE_ROUTE_THREADS, SWP_BN,
};
use crate::cuda::kernels::GemmSet;
use crate::cuda::launch::{blocks, launch};
use crate::cuda::{CudaBackend, DevWeight};

/// Fewest pairs a routing block takes (its 32 warps, one round each).
const ROUTE_MIN_CHUNK: usize = 1024;
/// Most routing blocks (each reads every block's counts per expert).
const ROUTE_MAX_BLOCKS: usize = 128;

/// Rows per MoE tile for `pairs` (token, expert) pairs over `experts`: 1 (GEMV) when experts
/// get about one row each (decode), 32 up to 40 rows per expert, else 64 (where the wgmma tile
/// does not take the projection: `wg_tile`). The 128-row f16-staged tile is not used for experts:
/// at 256 rows per expert (8,192 tokens) it was slower than the 64-row one for both the Q4_K
/// gate/up (1.13 against 1.06 ms) and the down projection (1.45 against 1.27 ms; lab/gemm
/// `--wg`, docs/results/2026-12-04-h200-wgmma).
pub(crate) fn moe_bm(pairs: usize, experts: usize) -> i64 {
    let mean = pairs as f64 / experts.max(1) as f64;
    if mean <= 2.0 {
        1
    } else if mean <= 40.0 {
        32
    } else {
        64
    }
}

/// The MoE routing tables in the workspace for `pairs` (token, expert) pairs over `experts`
/// experts, weight rows of `k` elements: the tile height, and (i32 each) counts[E], sorted[P],
/// tile expert / start / rows [max_tiles] each, err[2]; for the wgmma tile, then (256-byte
/// aligned) the input's `x_rows` rows as f16 in its K order (`x_f16_perm`). Made only by
/// [`tables`], which both the plan's workspace ([`work_bytes`]) and the launch use.
pub(crate) struct MoeTables {
    bm: i64,
    max_tiles: usize,
    experts: usize,
    pairs: usize,
    /// Runs on a wgmma tile (`wg_tile`): x is converted first, `x_rows` x `k` halves.
    wg: Option<WgTile>,
    x_rows: usize,
    k: usize,
}

impl MoeTables {
    pub(crate) fn new(
        pairs: usize,
        experts: usize,
        k: usize,
        ty: GgmlType,
        x_rows: usize,
        tiles: MoeTiles,
    ) -> MoeTables {
        let mean = pairs as f64 / experts.max(1) as f64;
        let wg = if k as i64 % GEMM_BK == 0 {
            wg_tile(ty, k, mean, tiles)
        } else {
            None
        };
        // The tensor-core tiles step through K in 64s; other K go through the GEMV.
        let bm = if k as i64 % GEMM_BK != 0 {
            1
        } else if let Some(t) = wg {
            t.bt()
        } else {
            moe_bm(pairs, experts)
        };
        MoeTables {
            wg,
            x_rows,
            k,
            bm,
            // Each expert's rows in ceil(count / bm) tiles: at most ceil(pairs / bm) +
            // min(experts, pairs), exactly `pairs` for one-row tiles (decode launched 256 + 8
            // tiles for 8 pairs, 97% of whose blocks only exited).
            max_tiles: if bm <= 1 {
                pairs.max(1)
            } else {
                pairs.div_ceil(bm as usize) + experts.min(pairs)
            },
            experts,
            pairs,
        }
    }
    /// One-row tiles (decode) need no tables: the GEMV takes the router's ids as the tile
    /// experts, tile t being pair t (see `moe_matmul`).
    pub(crate) fn direct(&self) -> bool {
        self.bm <= 1
    }
    /// Pairs per routing block and the blocks (`moe_route`'s grid): a block of 1,024 threads
    /// takes at least 1,024 pairs (one round of its warps), at most 128 blocks.
    pub(crate) fn route_grid(&self) -> (usize, usize) {
        let chunk = self.pairs.div_ceil(ROUTE_MAX_BLOCKS).max(ROUTE_MIN_CHUNK);
        (chunk, self.pairs.div_ceil(chunk).max(1))
    }
    /// i32s of the per-block counts (`moe_route_count`), none with one block.
    fn bcount_len(&self) -> usize {
        match self.route_grid() {
            (_, 1) => 0,
            (_, blocks) => blocks * (self.experts + 1),
        }
    }
    fn table_bytes(&self) -> usize {
        4 * (self.experts + self.pairs + 3 * self.max_tiles + 2 + self.bcount_len())
    }
    pub(crate) fn bytes(&self) -> usize {
        if self.direct() {
            return 0;
        }
        if self.wg.is_some() {
            return self.table_bytes().div_ceil(256) * 256 + 2 * self.x_rows * self.k;
        }
        self.table_bytes()
    }
    /// (counts, sorted, tile expert, tile start, tile rows, err, per-block counts or 0, f16 x
    /// or 0) from the workspace base.
    fn addresses(&self, base: u64) -> [u64; 8] {
        let counts = base;
        let sorted = counts + 4 * self.experts as u64;
        let t_exp = sorted + 4 * self.pairs as u64;
        let t_start = t_exp + 4 * self.max_tiles as u64;
        let t_rows = t_start + 4 * self.max_tiles as u64;
        let err = t_rows + 4 * self.max_tiles as u64;
        let bcount = if self.bcount_len() > 0 { err + 8 } else { 0 };
        let xh = if self.wg.is_some() {
            base + (self.table_bytes().div_ceil(256) * 256) as u64
        } else {
            0
        };
        [counts, sorted, t_exp, t_start, t_rows, err, bcount, xh]
    }
}

/// The routing tables of a MoE projection of `tokens` tokens with `k` experts each over the
/// expert weight `w` (`[K, N, E]`), its input one row per token or (`pair_input`) per pair:
/// the one place their shape is decided.
/// `ty`: the type the tiles read (the GGUF's, or F16 for a kept copy: `expert_source`);
/// `tiles`: the tiles the options allow (`MoeTiles::of`; one-row tiles do not depend on them).
fn tables(
    w: &DevWeight,
    ty: GgmlType,
    tokens: usize,
    k: usize,
    pair_input: bool,
    tiles: MoeTiles,
) -> MoeTables {
    let (kk, e) = (
        w.dims[0] as usize,
        w.dims.get(2).copied().unwrap_or(1) as usize,
    );
    let x_rows = if pair_input { tokens * k } else { tokens };
    MoeTables::new(tokens * k, e, kk, ty, x_rows, tiles)
}

/// Fewest (token, expert) pairs per expert, on average, at which a routed projection reads an
/// f16 copy of its weights (`TALLY_EXPERT_F16`): below it the projection is bound by the
/// weight bytes it reads, which the copy multiplies (2 bytes a weight against Q6_K's 0.82).
pub(crate) const EXPERT_F16_MIN_MEAN: f64 = 8.0;

/// Whether the routed projection over expert weights `w` (`[K, N, E]`) with `pairs` (token,
/// expert) pairs reads an f16 copy (`TALLY_EXPERT_F16`): the down projections (K <= WGX_K_MAX,
/// where the f16 x-resident tiles run) in the types whose in-tile decoding held the tile
/// (lab/gemm `--wg`, `scripts/gpu/expert-f16-lab.sh`), with at least EXPERT_F16_MIN_MEAN
/// rows per expert.
pub(crate) fn expert_f16_wanted(w: &DevWeight, pairs: usize) -> bool {
    expert_f16_wanted_for(w.ty, &w.dims, pairs)
}

/// [`expert_f16_wanted`] of a weight of type `ty` and ggml dims `dims`.
fn expert_f16_wanted_for(ty: GgmlType, dims: &[u64], pairs: usize) -> bool {
    let &[kk, _, e] = dims else {
        return false;
    };
    let mean = pairs as f64 / e.max(1) as f64;
    kk as usize <= WGX_K_MAX
        && kk % 128 == 0
        && matches!(ty, GgmlType::Q6_K)
        && mean >= EXPERT_F16_MIN_MEAN
}

/// The weights an `Op::MoeMatMul` over `w` with `pairs` pairs reads: its f16 copy (pointer,
/// F16, 2 K bytes a row) when `TALLY_EXPERT_F16` made one and wants it here, else the GGUF's.
pub(crate) fn expert_source(b: &CudaBackend, w: &DevWeight, pairs: usize) -> (u64, GgmlType, i64) {
    if b.options.expert_f16 && expert_f16_wanted(w, pairs) {
        if let Some(copy) = b.f16_experts.get(&w.buf.ptr) {
            return (copy.ptr, GgmlType::F16, 2 * w.dims[0] as i64);
        }
    }
    (w.buf.ptr, w.ty, w.row_bytes as i64)
}

/// Whether `Op::MoeMatMul` over `w` for `tokens` tokens, `k` experts each, runs on `gemv_<t>`
/// with one-row tiles read straight from the ids (what the paired gate/up launch of `fused.rs`
/// replaces, bit for bit).
pub(crate) fn runs_direct_gemv(w: &DevWeight, tokens: usize, k: usize) -> bool {
    w.dims.len() == 3
        && tables(w, w.ty, tokens, k, false, MoeTiles::DEFAULT).direct()
        && !use_mmv(w.ty, w.dims[0] as usize)
}

/// Whether `Op::MoeMatMul` over `w` for `tokens` tokens, `k` experts each, runs on `mmv_<t>`
/// with one-row tiles read straight from the ids (no routing launch).
pub(crate) fn runs_direct_mmv(w: &DevWeight, tokens: usize, k: usize) -> bool {
    w.dims.len() == 3
        && tables(w, w.ty, tokens, k, false, MoeTiles::DEFAULT).direct()
        && use_mmv(w.ty, w.dims[0] as usize)
}

/// Workspace bytes of node `index` (`Op::MoeMatMul` with `k` experts per token): its tables.
pub fn work_bytes(
    b: &CudaBackend,
    plan: &Plan,
    index: usize,
    k: usize,
    pair_input: bool,
) -> Result<usize, EngineError> {
    let w = b.weights.of(plan, index, 0)?;
    let tokens = plan.nodes[index].inputs[1].rows;
    let (_, ty, _) = expert_source(b, w, tokens * k);
    Ok(tables(w, ty, tokens, k, pair_input, MoeTiles::of(&b.options)).bytes())
}

/// One `Op::MoeMatMul` launch's arguments (its routing tables made, when it needs them).
pub(crate) struct ExpertGemm {
    pub a: GemmArgs,
    pub set: GemmSet,
    pub ty: GgmlType,
    /// K, output columns N, (token, expert) pairs, tile rows and tiles.
    pub kk: usize,
    pub n: usize,
    pub pairs: usize,
    pub bm: i64,
    pub max_tiles: usize,
    /// The wgmma tile's x conversion (launched before it), when the tiles run on one.
    pub xperm: Option<XPermArgs>,
    /// That tile.
    pub wg: Option<WgTile>,
}

impl ExpertGemm {
    /// grid.x of its `mmv_<t>` launch, when it runs on one (one-row tiles, mmv's K): about
    /// four waves of blocks over the used tiles (one per pair at decode).
    pub(crate) fn mmv_grid_x(&self, sms: u32) -> Option<u32> {
        (self.bm == 1 && use_mmv(self.ty, self.kk)).then(|| {
            let per_tile = (4 * sms).div_ceil(self.pairs.max(1) as u32);
            mmv_grid_x(self.ty, self.n, self.kk, per_tile)
        })
    }
}

/// `Op::MoeMatMul`: node `index` of `plan`.
pub fn moe_matmul(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    io: &Io,
    k: usize,
    pair_input: bool,
) -> Result<(), EngineError> {
    let eg = expert_gemm(b, plan, index, io, k, pair_input, MoeTiles::of(&b.options))?;
    let (a, set, ty, kk, n, bm, max_tiles) =
        (eg.a, eg.set, eg.ty, eg.kk, eg.n, eg.bm, eg.max_tiles);
    let s = b.cu_stream();
    if let Some(xp) = eg.xperm {
        launch_xperm(b, &xp)?;
        let tile = eg
            .wg
            .ok_or_else(|| EngineError::Internal("x conversion without a wgmma tile".into()))?;
        let f = match tile {
            WgTile::XS128 => Some(set.xs128),
            _ => WgTile::ALL
                .iter()
                .position(|&t| t == tile)
                .map(|i| set.wg[i]),
        }
        .ok_or_else(|| EngineError::Internal("a wgmma tile without a kernel".into()))?;
        let grid = (tile.grid_x(n, b.options.wgx_walk), max_tiles as u32, 1);
        // SAFETY: as for the tensor-core tiles below (the same GemmArgs, routing tables and
        // views), with the x rows read from the converted copy `xh` (x_rows x K halves, ld K,
        // 16-byte aligned: 256-byte offset in the workspace, K % 128 == 0), tiles of bm =
        // tile.bt() rows, blocks of SWP_BN columns (w128: one each; the x-resident tiles walk
        // theirs, K <= WGX_K_MAX: wg_tile), the tile's threads (512 for xs128, whose body returns
        // at any other count), and the dynamic shared memory gemm_wg.cuh's own size for (type,
        // tile) (asserted at kernel build), which `configure` raised the limit to.
        return unsafe { launch(f, grid, (tile.threads(), 1, 1), tile.smem_bytes(ty), s, &a) };
    }
    if let Some(gx) = eg.mmv_grid_x(b.props.sm_count) {
        let f = mmv_kernel(b, &set, ty, kk, false);
        // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). grid.y
        // is the max_tiles = T*k one-row tiles, tile t being pair t (tile_start null) whose
        // expert is ids[t], the node's contiguous T x k i32 view; grid.x row steps inside the
        // N rows (grid-stride); input row t / x_div lies inside the node's input view, experts'
        // weights are e < n_expert = E blocks of N rows (size checked in expert_gemm; other ids
        // write nothing), outputs go to the node's T*k x N view.
        return unsafe { launch(f, (gx, max_tiles as u32, 1), (MMV_THREADS, 1, 1), 0, s, &a) };
    }
    if bm == SWAP_BT && use_swap(ty, kk) {
        let grid = (blocks(n as i64, SWP_BN as u32), max_tiles as u32, 1);
        // SAFETY: as for the tensor-core tiles below (the same GemmArgs, routing tables and
        // views), with SWP_BN columns per block, tiles of bm = SWAP_BT rows (the swapped tile's
        // x rows), K % SWP_BK == 0 (use_swap), and the dynamic shared memory gemm.cu's own size
        // for (type, SWAP_BT) (asserted at kernel build), which `configure` raised the limit to.
        return unsafe {
            launch(
                set.swap,
                grid,
                (GEMM_THREADS, 1, 1),
                swap_smem_bytes(ty, SWAP_BT),
                s,
                &a,
            )
        };
    }
    if bm == 1 {
        let min_threads = gemv_min_threads(ty, kk, 2);
        let (gx, threads) = gemv_grid(n, 2, max_tiles, b.props.sm_count, min_threads);
        let grid = (gx, max_tiles as u32, 1);
        let f = gemv2_kernel(b, &set, ty, kk);
        // SAFETY: as for mmv (one-row tiles read from the ids), with 2 output columns per
        // warp and at most GEMV_THREADS threads (gemv_<t>'s and gemvi_<t>'s launch bound).
        unsafe { launch(f, grid, (threads, 1, 1), 0, s, &a) }
    } else {
        let v = TILE_BM
            .iter()
            .position(|&x| x == bm)
            .unwrap_or(TILE_BM.len() - 1);
        let grid = (blocks(n as i64, GEMM_BN as u32), max_tiles as u32, 1);
        // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). grid.y
        // is the max_tiles tiles moe_route wrote (unused ones exit); rows come from sorted_rows
        // (pairs < T*k; input row pair / x_div inside the node's input view), experts' weights
        // from e < E blocks of N rows (size checked in expert_gemm), outputs to the node's
        // T*k x N view; GEMM_BN columns per block and tiles of bm <= BM rows
        // (MoeTables picks bm from TILE_BM only where K % GEMM_BK == 0); the dynamic shared
        // memory is gemm.cu's own size for (type, BM) (asserted at kernel build), which
        // `configure` raised the kernel's limit to.
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

/// The wgmma tile's x conversion of an expert GEMM (`ExpertGemm::xperm`, made by
/// [`expert_gemm`]).
pub(crate) fn launch_xperm(b: &CudaBackend, xp: &XPermArgs) -> Result<(), EngineError> {
    // SAFETY: XPermArgs mirrors gemm_wg.cuh's struct (layout asserted at kernel build). One
    // thread per 16-byte output chunk (grid ceil(rows * K / 8 / 256) of 256): it reads the
    // node's input view (x_rows rows of K, ld ldx) and writes x_rows x K halves at `out`, the f16
    // part of the workspace that `tables.bytes()` sized (K % 128 == 0: wg_tile); expert_gemm
    // made the arguments from the node's views and those tables.
    unsafe {
        launch(
            b.kernels.x_f16_perm,
            (blocks(xp.m as i64 * (xp.k as i64 / 8), 256), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            xp,
        )
    }
}

/// The tile height of the gated gate/up launch (`gemm_<t>_g32` / `_g128`, fused.rs) of an
/// `Op::MoeMatMul` over `w` for `tokens` tokens, `k` experts each, one input row per token:
/// 32 or 128 where its tables put it on `gemm_<t>_w32` or `_w128`, else None (the gated tile
/// gives the bits of those two only).
pub(crate) fn gated_bt(w: &DevWeight, tokens: usize, k: usize, tiles: MoeTiles) -> Option<WgTile> {
    // The gated tile reads the GGUF's weights: never where an expert copy would be read.
    if w.dims.len() != 3 || expert_f16_wanted(w, tokens * k) {
        return None;
    }
    let t = tables(w, w.ty, tokens, k, false, tiles);
    match t.wg {
        Some(tile @ (WgTile::W32 | WgTile::W128 | WgTile::W256)) if !t.direct() => Some(tile),
        _ => None,
    }
}

/// The arguments of node `index`'s expert GEMM (checked against its weights), after the
/// routing tables' launch when the node needs one (more than one row per tile).
pub(crate) fn expert_gemm(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    io: &Io,
    k: usize,
    pair_input: bool,
    tiles: MoeTiles,
) -> Result<ExpertGemm, EngineError> {
    let node = &plan.nodes[index];
    let w = b.weights.of(plan, index, 0)?;
    if w.dims.len() != 3 || w.buf.bytes < w.row_bytes * (w.dims[1] * w.dims[2]) as usize {
        return Err(EngineError::Internal(format!(
            "expert weight {} of dims {:?} in {} bytes",
            w.name, w.dims, w.buf.bytes
        )));
    }
    let (kk, n, e) = (w.dims[0] as usize, w.dims[1] as usize, w.dims[2] as usize);
    let tokens = node.inputs[1].rows;
    // The f16 copy, where TALLY_EXPERT_F16 made one for this projection (E blocks of N rows of
    // 2 K bytes: keep_f16 sized it from the same dims).
    let (wptr, ty, row_bytes) = expert_source(b, w, tokens * k);
    let tables = tables(w, ty, tokens, k, pair_input, tiles);
    let set = *b.kernels.gemm_set(ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} expert weights", ty.name()))
    })?;
    if e as i64 > MOE_ROUTE_MAX_E {
        return Err(EngineError::Unsupported(format!(
            "MoE routing supports up to {MOE_ROUTE_MAX_E} experts; the model has {e}"
        )));
    }
    let pairs = tokens * k;
    let (bm, max_tiles) = (tables.bm, tables.max_tiles);
    let ids = io.ins[1];
    if ids.1 != k as i64 {
        return Err(EngineError::Internal(
            "expert ids must be a contiguous [T, k] view".into(),
        ));
    }
    let s = b.cu_stream();
    // One-row tiles: tile t is pair t with expert ids[t]; the kernels read the ids directly (no
    // moe_route launch, no tables: decode ran three 5 us single-block routing launches per layer).
    let [counts, sorted, t_exp, t_start, t_rows, err, bcount, xh] = if tables.direct() {
        [0, 0, ids.0, 0, 0, 0, 0, 0]
    } else {
        tables.addresses(b.workspace(tables.bytes())?)
    };
    if !tables.direct() {
        let (chunk, route_blocks) = tables.route_grid();
        let r = MoeRouteArgs {
            ids: ids.0,
            n_tokens: tokens as i32,
            k: k as i32,
            n_expert: e as i32,
            bm: bm as i32,
            max_tiles: max_tiles as i32,
            chunk: chunk as i32,
            counts,
            sorted_rows: sorted,
            tile_expert: t_exp,
            tile_start: t_start,
            tile_rows: t_rows,
            err,
            bcount,
        };
        // More than one block: moe_route_count first, then moe_route over the same grid.
        let kernels = [b.kernels.moe_route_count, b.kernels.moe_route];
        for &kernel in &kernels[usize::from(route_blocks == 1)..] {
            // SAFETY: MoeRouteArgs mirrors moe.cu's struct (layout asserted at kernel build).
            // Blocks of MOE_ROUTE_THREADS over ceil(P / chunk) blocks, as the kernels require;
            // block b reads ids [b chunk, (b + 1) chunk) of the node's contiguous T x k view
            // (checked above). moe_route_count writes bcount[b][0..=E]; moe_route reads it (the
            // launch before it on this stream) and writes the tables; both at the workspace
            // offsets `addresses` gives, in the workspace grown above to `tables.bytes()` (the
            // same MoeTables: blocks x (E + 1) i32s of bcount when there are several blocks).
            unsafe {
                launch(
                    kernel,
                    (route_blocks as u32, 1, 1),
                    (MOE_ROUTE_THREADS, 1, 1),
                    0,
                    s,
                    &r,
                )
            }?;
        }
    }
    let a = GemmArgs {
        w: wptr,
        w_row_bytes: row_bytes,
        w_expert_bytes: row_bytes * n as i64,
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        m: pairs as i32,
        n: n as i32,
        k: kk as i32,
        sorted_rows: sorted,
        x_div: if pair_input { 1 } else { k as i32 },
        tile_expert: t_exp,
        tile_start: t_start,
        tile_rows: t_rows,
        layout: 0,
        head_dim: 0,
        n_head: 0,
        n_expert: e as i32,
        w2: 0,
        y2: 0,
        ldy2: 0,
        y3: 0,
        ldy3: 0,
        xh,
        ldxh: if tables.wg.is_some() { kk as i64 } else { 0 },
    };
    let xperm = tables.wg.map(|_| XPermArgs {
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        out: xh,
        ldo: kk as i64,
        m: tables.x_rows as i32,
        k: kk as i32,
        kquant: i32::from(matches!(
            ty,
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K
        )),
        pad0: 0,
    });
    Ok(ExpertGemm {
        a,
        set,
        ty,
        kk,
        n,
        pairs,
        bm,
        max_tiles,
        xperm,
        wg: tables.wg,
    })
}

/// `Op::MoeCombine`: the experts' outputs weighted by the router, one thread per output element.
pub fn combine(b: &CudaBackend, node: &Node, io: &Io, k: usize) -> Result<(), EngineError> {
    let v_out = node.outputs[0];
    let a = CombineArgs {
        y: io.ins[0].0,
        ldy: io.ins[0].1,
        w: io.ins[1].0,
        ldw: io.ins[1].1,
        out: io.outs[0].0,
        ldo: io.outs[0].1,
        rows: v_out.rows as i32,
        cols: v_out.cols as i32,
        k: k as i32,
    };
    let n = (v_out.rows * v_out.cols) as i64;
    // SAFETY: CombineArgs mirrors moe.cu's struct (layout asserted at kernel build). One thread
    // per T x D output element; y is the node's T*k x D view, w its T x k view, out its T x D
    // view, in buffers `prepare` sized.
    unsafe {
        launch(
            b.kernels.moe_combine,
            (blocks(n, 256), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which tile each prefill size gets, and where the wgmma tile's f16 copy of x lies: after
    /// the routing tables, 256-byte aligned, inside the workspace the tables ask for.
    #[test]
    fn tiles_by_rows_per_expert_and_the_wgmma_copy_of_x() {
        // 8,192 tokens of the 35B model: 65,536 pairs over 256 experts, 256 rows each.
        let gate = MoeTables::new(65536, 256, 2048, GgmlType::Q4_K, 8192, MoeTiles::DEFAULT);
        assert!(gate.wg == Some(WgTile::W128) && gate.bm == 128);
        let base = 0x1000_0000u64;
        let a = gate.addresses(base);
        // 64 routing blocks of 1,024 pairs, their counts (257 each) after the error counters
        // and before the copy.
        assert_eq!(gate.route_grid(), (1024, 64));
        assert_eq!(a[6], a[5] + 8);
        assert_eq!(a[7] % 256, 0);
        assert!(
            a[7] >= a[6] + 4 * 64 * 257,
            "the copy must not overlap the per-block counts"
        );
        assert_eq!(gate.bytes() as u64, a[7] - base + 2 * 8192 * 2048);
        // The down projections (K = 512) on the x-resident tiles (x one row per pair; x128's
        // grid.x 2 for N = 2048; Q6_K on xs128 by default, x96 with TALLY_WSX=off); TALLY_WGX=off:
        // Q6_K on w128.
        let d6 = MoeTables::new(65536, 256, 512, GgmlType::Q6_K, 65536, MoeTiles::DEFAULT);
        assert!(d6.wg == Some(WgTile::XS128) && d6.bytes() >= 2 * 65536 * 512);
        let no_wsx = MoeTiles {
            wsx: false,
            ..MoeTiles::DEFAULT
        };
        let d6 = MoeTables::new(65536, 256, 512, GgmlType::Q6_K, 65536, no_wsx);
        assert!(d6.wg == Some(WgTile::X96) && d6.bytes() >= 2 * 65536 * 512);
        let d6o = MoeTables::new(65536, 256, 512, GgmlType::Q6_K, 65536, MoeTiles::NO_WGX);
        assert!(d6o.wg == Some(WgTile::W128) && d6o.bm == 128);
        let d4 = MoeTables::new(65536, 256, 512, GgmlType::Q4_K, 65536, MoeTiles::DEFAULT);
        assert!(d4.wg == Some(WgTile::X128) && d4.bm == 128 && d4.addresses(base)[7] != 0);
        assert_eq!(WgTile::X128.grid_x(2048, None), 2);
        assert_eq!(WgTile::X128.grid_x(2048, Some(4)), 4);
        // Every block format's down on the x-resident tiles; a BF16 expert weight's on the
        // 64-row tile (w128 from 100 rows only), no x conversion.
        let d8 = MoeTables::new(65536, 256, 512, GgmlType::Q8_0, 65536, MoeTiles::DEFAULT);
        assert!(d8.wg == Some(WgTile::X128) && d8.bm == 128);
        let db = MoeTables::new(16384, 256, 512, GgmlType::BF16, 16384, MoeTiles::DEFAULT);
        assert!(db.wg.is_none() && db.bm == 64 && db.addresses(base)[7] == 0);
        assert_eq!(db.bytes(), db.table_bytes());
        // 512 tokens: every block format's down on x32 (a block walks 4 of the 16 weight
        // blocks), Q6_K's on x64 with TALLY_X32=off, Q4_K's and IQ4_XS's on the 32-row mma
        // tiles; the Q4_K gate/up on w32 (x converted), the IQ4_XS gate/up on the 32-row tiles.
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::IQ4_XS,
            GgmlType::MXFP4,
            GgmlType::Q3_K,
            GgmlType::Q4_0,
        ] {
            let t = MoeTables::new(4096, 256, 512, ty, 4096, MoeTiles::DEFAULT);
            assert!(t.wg == Some(WgTile::X32) && t.bm == 32, "{ty:?}");
        }
        assert_eq!(WgTile::X32.grid_x(2048, None), 4);
        assert_eq!(WgTile::X32.grid_x(2048, Some(3)), 6);
        // x32's ring: 4 stages of Q4_K's 32-byte slots (two blocks an SM), 3 of Q6_K's 112.
        assert_eq!(WgTile::X32.smem_bytes(GgmlType::Q4_K), 99_584);
        assert_eq!(WgTile::X32.smem_bytes(GgmlType::Q6_K), 206_080);
        let no_x32 = MoeTiles {
            x32: false,
            ..MoeTiles::DEFAULT
        };
        let d6s = MoeTables::new(4096, 256, 512, GgmlType::Q6_K, 4096, no_x32);
        assert!(d6s.wg == Some(WgTile::X64) && d6s.bm == 64);
        assert_eq!(WgTile::X64.grid_x(2048, None), 2);
        for ty in [GgmlType::Q4_K, GgmlType::IQ4_XS] {
            let t = MoeTables::new(4096, 256, 512, ty, 4096, no_x32);
            assert!(t.wg.is_none() && t.bm == 32, "{ty:?}");
        }
        let g4s = MoeTables::new(4096, 256, 2048, GgmlType::Q4_K, 512, MoeTiles::DEFAULT);
        assert!(g4s.wg == Some(WgTile::W32) && g4s.bm == 32 && g4s.addresses(base)[7] != 0);
        let gis = MoeTables::new(4096, 256, 2048, GgmlType::IQ4_XS, 512, MoeTiles::DEFAULT);
        assert!(gis.wg.is_none() && gis.bm == 32);
        // 2,048 tokens (64 rows per expert): the Q4_K gate/up on w128 (its gated launch the
        // warp-specialised gs128), on w32 without it (TALLY_WS=off or TALLY_GATED=off); its
        // down on x96; the Q5_K gate/up on the 64-row tiles. 400 tokens (50 rows): still w32.
        let g4m = MoeTables::new(16384, 256, 2048, GgmlType::Q4_K, 2048, MoeTiles::DEFAULT);
        assert!(g4m.wg == Some(WgTile::W128) && g4m.bm == 128);
        // The gated launch's tables with gs256 on: 256-row tiles above 128 rows per expert for
        // the Q4_K and MXFP4 gate/up only (8,192 tokens: 256 rows; 6,400: 200), never for the
        // unfused launches' tiles, the downs (K = 512) or a type whose stages do not fit;
        // 4,096 tokens (128 rows) and 5,600 (175) stay on the 128-row tables.
        let gated = MoeTiles {
            ws256: true,
            ..MoeTiles::DEFAULT
        };
        for (pairs, ty) in [
            (65536, GgmlType::Q4_K),
            (51200, GgmlType::Q4_K),
            (65536, GgmlType::MXFP4),
        ] {
            let t = MoeTables::new(pairs, 256, 2048, ty, pairs / 8, gated);
            assert!(t.wg == Some(WgTile::W256) && t.bm == 256, "{ty:?} {pairs}");
            assert_eq!(t.max_tiles, pairs.div_ceil(256) + 256);
        }
        for (pairs, k, ty) in [
            (16384, 2048, GgmlType::Q4_K),
            (32768, 2048, GgmlType::Q4_K),
            (44800, 2048, GgmlType::Q4_K),
            (65536, 512, GgmlType::Q4_K),
            (65536, 2048, GgmlType::Q6_K),
            (65536, 2048, GgmlType::Q5_K),
        ] {
            let t = MoeTables::new(pairs, 256, k, ty, pairs / 8, gated);
            assert!(
                t.wg != Some(WgTile::W256) && t.bm <= 128,
                "{ty:?} {pairs} {k}"
            );
        }
        assert_eq!(WgTile::W256.smem_bytes(GgmlType::Q4_K), 216_064);
        // gs256a: two A stages and a two-stage ring fill the 227 KB opt-in exactly at 32-byte
        // slots; Q6_K's do not fit.
        use crate::cuda::ops::matmul::ws256a_smem_if_fits;
        assert_eq!(ws256a_smem_if_fits(GgmlType::Q4_K), Some(232_448));
        assert_eq!(ws256a_smem_if_fits(GgmlType::Q6_K), None);
        assert!(
            crate::cuda::ops::matmul::wg_tile_smem_if_fits(GgmlType::Q6_K, WgTile::W256).is_none()
        );
        assert!(!WgTile::ALL.contains(&WgTile::W256));
        // TALLY_WSX=all: the downs of more than 100 rows per expert on xs128 (every block format,
        // Q6_K too: its ring shrinks to one stage), the gate/up and the f16 copies never.
        let wsx = MoeTiles {
            wsx: true,
            wsx_all: true,
            ..MoeTiles::DEFAULT
        };
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::MXFP4,
        ] {
            let t = MoeTables::new(65536, 256, 512, ty, 65536, wsx);
            assert!(t.wg == Some(WgTile::XS128) && t.bm == 128, "{ty:?}");
            let t = MoeTables::new(16384, 256, 512, ty, 16384, wsx);
            assert!(t.wg != Some(WgTile::XS128), "{ty:?} at 64 rows");
        }
        for (k, ty) in [(2048, GgmlType::Q4_K), (512, GgmlType::F16)] {
            let t = MoeTables::new(65536, 256, k, ty, 65536, wsx);
            assert!(t.wg != Some(WgTile::XS128), "{ty:?} K {k}");
        }
        // By default only Q6_K's downs take xs128, the one format it measured faster for.
        let t = MoeTables::new(65536, 256, 512, GgmlType::Q6_K, 65536, MoeTiles::DEFAULT);
        assert!(t.wg == Some(WgTile::XS128), "Q6_K by default");
        for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::MXFP4] {
            let t = MoeTables::new(65536, 256, 512, ty, 65536, MoeTiles::DEFAULT);
            assert!(t.wg == Some(WgTile::X128), "{ty:?} by default");
        }
        assert_eq!(WgTile::XS128.smem_bytes(GgmlType::Q4_K), 215_040);
        assert_eq!(WgTile::XS128.smem_bytes(GgmlType::Q6_K), 223_232);
        assert_eq!(WgTile::XS128.threads(), 512);
        assert_eq!(WgTile::XS128.grid_x(2048, None), 2);
        // Only the gated launch's tiles take gs256, and only with the warp-specialised tile on.
        let opts = |vars: &'static [(&'static str, &'static str)]| {
            crate::cuda::CudaOptions::from_vars(|k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
            .expect("options")
        };
        let on = opts(&[("TALLY_WS256", "on")]);
        assert!(MoeTiles::gated(&on).ws256 && !MoeTiles::of(&on).ws256);
        assert!(!MoeTiles::gated(&opts(&[("TALLY_WS256", "on"), ("TALLY_WS", "off")])).ws256);
        assert!(MoeTiles::gated(&opts(&[])).ws256);
        assert!(!MoeTiles::gated(&opts(&[("TALLY_WS256", "off")])).ws256);
        let no_ws = MoeTiles {
            ws_gated: false,
            ..MoeTiles::DEFAULT
        };
        let g4w = MoeTables::new(16384, 256, 2048, GgmlType::Q4_K, 2048, no_ws);
        assert!(g4w.wg == Some(WgTile::W32) && g4w.bm == 32);
        let g4b = MoeTables::new(3200, 256, 2048, GgmlType::Q4_K, 400, MoeTiles::DEFAULT);
        assert!(g4b.wg == Some(WgTile::W32));
        let d4m = MoeTables::new(16384, 256, 512, GgmlType::Q4_K, 16384, MoeTiles::DEFAULT);
        assert!(d4m.wg == Some(WgTile::X96) && d4m.bm == 96);
        let dim = MoeTables::new(16384, 256, 512, GgmlType::IQ4_XS, 16384, MoeTiles::DEFAULT);
        assert!(dim.wg == Some(WgTile::X96) && dim.bm == 96);
        let g5m = MoeTables::new(16384, 256, 2048, GgmlType::Q5_K, 2048, MoeTiles::DEFAULT);
        assert!(g5m.wg.is_none() && g5m.bm == 64);
        // TALLY_WGX=off: the tiles of before (Q4_K down on m64, Q6_K down of 512 tokens on
        // the 32-row ones).
        let d4o = MoeTables::new(65536, 256, 512, GgmlType::Q4_K, 65536, MoeTiles::NO_WGX);
        assert!(d4o.wg.is_none() && d4o.bm == 64);
        let d6so = MoeTables::new(4096, 256, 512, GgmlType::Q6_K, 4096, MoeTiles::NO_WGX);
        assert!(d6so.wg.is_none() && d6so.bm == 32);
        // The x-resident tile of 128 rows does not fit with Q6_K's 112-byte slots.
        assert!(
            crate::cuda::ops::matmul::wg_tile_smem_if_fits(GgmlType::Q6_K, WgTile::X128).is_none()
        );
        // 32,768 tokens: at most 128 routing blocks, so 2,048 pairs each.
        let long = MoeTables::new(262144, 256, 2048, GgmlType::Q4_K, 32768, MoeTiles::DEFAULT);
        assert_eq!(long.route_grid(), (2048, 128));
        // 512 tokens, TALLY_WGX=off: 16 rows per expert, the 32-row tiles.
        let p512 = MoeTables::new(4096, 256, 2048, GgmlType::Q4_K, 512, MoeTiles::NO_WGX);
        assert!(p512.wg.is_none() && p512.bm == 32);
        assert_eq!(p512.route_grid(), (1024, 4));
        // A short prompt: one routing block, no per-block counts.
        let short = MoeTables::new(296, 256, 2048, GgmlType::Q4_K, 37, MoeTiles::DEFAULT);
        assert_eq!(short.route_grid(), (1024, 1));
        assert_eq!(short.addresses(base)[6], 0);
        assert_eq!(
            short.table_bytes(),
            4 * (256 + 296 + 3 * short.max_tiles + 2)
        );
        // Decode: one-row tiles read from the ids, no tables at all.
        let one = MoeTables::new(8, 256, 2048, GgmlType::Q4_K, 1, MoeTiles::DEFAULT);
        assert!(one.direct() && one.bytes() == 0);
        // An expert copy's f16 downs (TALLY_EXPERT_F16): x64 up to 32 rows per expert, x96 to
        // 100, x128 above (it fits for f16: 231,424 bytes).
        for (pairs, tile) in [
            (4096, WgTile::X64),
            (16384, WgTile::X96),
            (65536, WgTile::X128),
        ] {
            let t = MoeTables::new(pairs, 256, 512, GgmlType::F16, pairs, MoeTiles::DEFAULT);
            assert_eq!(t.wg, Some(tile), "{pairs} pairs");
        }
        assert_eq!(WgTile::X128.smem_bytes(GgmlType::F16), 231_424);
        // K not a multiple of the tiles' K step: the GEMV, whatever the rows.
        let odd = MoeTables::new(65536, 256, 2000, GgmlType::F32, 8192, MoeTiles::DEFAULT);
        assert!(odd.direct() && odd.wg.is_none());
    }

    /// Which routed projections read an f16 copy under TALLY_EXPERT_F16: the Q6_K downs (K =
    /// 512) from 8 rows per expert; never the gate/up (K = 2048, where f16 lost to Q4_K in the
    /// lab), other types, decode (8 pairs) or a 2-D weight.
    #[test]
    fn expert_f16_copies_only_the_q6_k_downs_of_prompts() {
        let down = [512, 2048, 256];
        assert!(expert_f16_wanted_for(GgmlType::Q6_K, &down, 4096));
        assert!(expert_f16_wanted_for(GgmlType::Q6_K, &down, 2048));
        assert!(!expert_f16_wanted_for(GgmlType::Q6_K, &down, 2047));
        assert!(!expert_f16_wanted_for(GgmlType::Q6_K, &down, 8));
        assert!(!expert_f16_wanted_for(GgmlType::Q4_K, &down, 65536));
        assert!(!expert_f16_wanted_for(
            GgmlType::Q6_K,
            &[2048, 512, 256],
            65536
        ));
        assert!(!expert_f16_wanted_for(GgmlType::Q6_K, &[512, 2048], 65536));
        assert!(!expert_f16_wanted_for(
            GgmlType::Q6_K,
            &[320, 2048, 256],
            65536
        ));
    }
}
