//! Routed-expert projections (`Op::MoeMatMul`, reference `cpu/ops/moe.rs`): `moe_route` groups
//! the (token, expert) pairs by expert into tiles, then the GEMM of the weight type runs them.

use tally_model::Node;

use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::*;
use crate::cuda::dispatch::Io;
use crate::cuda::launch::{blocks, launch};

use super::matmul::{MMV_THREADS, gemm_kernels, mmv_grid_x, mmv_kernel, use_mmv};

/// Rows per MoE tile for `pairs` (token, expert) pairs over `experts`: 1 (GEMV) when experts
/// get about one row each (decode), else the tensor-core tile nearest the mean rows per expert.
pub(crate) fn moe_bm(pairs: usize, experts: usize) -> i64 {
    let mean = pairs as f64 / experts.max(1) as f64;
    if mean <= 2.0 {
        1
    } else if mean <= 40.0 {
        32
    } else if mean <= 100.0 {
        64
    } else {
        128
    }
}

/// The MoE routing tables in the workspace for `pairs` (token, expert) pairs over `experts`
/// experts, weight rows of `k` elements: the tile height, and (i32 each) counts[E], sorted[P],
/// tile expert / start / rows [max_tiles] each, err[2]. The one place their size is computed
/// (the plan's workspace and each launch use it).
pub(crate) struct MoeTables {
    bm: i64,
    max_tiles: usize,
    experts: usize,
    pairs: usize,
}

impl MoeTables {
    pub(crate) fn new(pairs: usize, experts: usize, k: usize) -> MoeTables {
        // The tensor-core tiles step through K in 64s; other K go through the GEMV.
        let bm = if k % 64 != 0 {
            1
        } else {
            moe_bm(pairs, experts)
        };
        MoeTables {
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
    pub(crate) fn bytes(&self) -> usize {
        4 * (self.experts + self.pairs + 3 * self.max_tiles + 2)
    }
    /// (counts, sorted, tile expert, tile start, tile rows, err) from the workspace base.
    fn addresses(&self, base: u64) -> [u64; 6] {
        let counts = base;
        let sorted = counts + 4 * self.experts as u64;
        let t_exp = sorted + 4 * self.pairs as u64;
        let t_start = t_exp + 4 * self.max_tiles as u64;
        let t_rows = t_start + 4 * self.max_tiles as u64;
        let err = t_rows + 4 * self.max_tiles as u64;
        [counts, sorted, t_exp, t_start, t_rows, err]
    }
}

pub(crate) fn moe_gemm(
    b: &mut CudaBackend,
    node: &Node,
    io: &Io,
    k: usize,
    pair_input: bool,
) -> Result<(), EngineError> {
    let s = b.cu_stream();
    let w = b.weight(&node.weights[0])?;
    let (kk, n, e) = (w.dims[0] as usize, w.dims[1] as usize, w.dims[2] as usize);
    let ty = w.ty;
    let (wptr, row_bytes) = (w.buf.ptr, w.row_bytes as i64);
    let names = gemm_kernels(ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} expert weights", ty.name()))
    })?;
    if e > 256 {
        return Err(EngineError::Unsupported(format!(
            "MoE routing supports up to 256 experts; the model has {e}"
        )));
    }
    let tokens = node.inputs[1].rows;
    let pairs = tokens * k;
    let tables = MoeTables::new(pairs, e, kk);
    let (bm, max_tiles) = (tables.bm, tables.max_tiles);
    let base = b.workspace(tables.bytes())?;
    let [counts, sorted, t_exp, t_start, t_rows, err] = tables.addresses(base);
    let ids = io.ins[1];
    if ids.1 != k as i64 {
        return Err(EngineError::Internal(
            "expert ids must be a contiguous [T, k] view".into(),
        ));
    }
    let r = MoeRouteArgs {
        ids: ids.0,
        n_tokens: tokens as i32,
        k: k as i32,
        n_expert: e as i32,
        bm: bm as i32,
        max_tiles: max_tiles as i32,
        counts,
        sorted_rows: sorted,
        tile_expert: t_exp,
        tile_start: t_start,
        tile_rows: t_rows,
        err,
    };
    // SAFETY: `r` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
    // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
    // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
    unsafe { launch(b.kernel("moe_route")?, (1, 1, 1), (1024, 1, 1), 0, s, &r) }?;
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
    };
    if bm == 1 && use_mmv(ty, n, kk) {
        if let Some(name) = mmv_kernel(ty) {
            // About four waves of blocks over the used tiles (one per pair at decode).
            let per_tile = (4 * b.props.sm_count).div_ceil(pairs.max(1) as u32);
            let gx = mmv_grid_x(ty, n, kk, per_tile);
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs);
            // its pointers are the node's views, the expert weights on the device and the
            // routing tables in the workspace `MoeTables` sized; unused tiles exit.
            return unsafe {
                launch(
                    b.kernel(name)?,
                    (gx, max_tiles as u32, 1),
                    (MMV_THREADS, 1, 1),
                    0,
                    s,
                    &a,
                )
            };
        }
    }
    if bm == 1 {
        let grid = (blocks(n as i64, GEMV_ROWS as u32), max_tiles as u32, 1);
        // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
        // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
        // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
        unsafe { launch(b.kernel(names[3])?, grid, (256, 1, 1), 0, s, &a) }
    } else {
        let v = match bm {
            128 => 0,
            64 => 1,
            _ => 2,
        };
        let grid = (blocks(n as i64, GEMM_BN as u32), max_tiles as u32, 1);
        // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
        // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
        // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
        unsafe {
            launch(
                b.kernel(names[v])?,
                grid,
                (256, 1, 1),
                gemm_smem_bytes(ty, bm),
                s,
                &a,
            )
        }
    }
}
