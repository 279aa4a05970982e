//! The router's softmax and top-k (`Op::TopK`; reference `cpu/ops/router.rs`): `router_topk` of
//! `kernels/router.cu`, one warp per token.

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::{RouterArgs, TopkArgs};
use crate::cuda::launch::{blocks, launch};

pub fn topk(b: &CudaBackend, node: &Node, io: &Io, k: usize) -> Result<(), EngineError> {
    let l = node.inputs[0];
    let a = TopkArgs {
        logits: io.ins[0].0,
        ld: io.ins[0].1,
        ids: io.outs[0].0,
        ld_ids: io.outs[0].1,
        w: io.outs[1].0,
        ld_w: io.outs[1].1,
        rows: l.rows as i32,
        experts: l.cols as i32,
        k: k as i32,
    };
    if l.cols > 1024 || k > 16 {
        return Err(EngineError::Unsupported(format!(
            "router top-{k} of {} experts exceeds the kernel's limits (1024, 16)",
            l.cols
        )));
    }
    let kernel = if l.cols <= 256 {
        b.kernels.router_topk8
    } else {
        b.kernels.router_topk
    };
    // SAFETY: TopkArgs mirrors router.cu's struct (layout asserted at kernel build). One warp
    // per logits row (8 per block; warps past `rows` return); experts <= 1024 (<= 256 for
    // router_topk8, picked above) and k <= 16 as the kernel's registers hold (checked above);
    // logits, ids (i32) and weights are the node's views of buffers `prepare` sized, k columns
    // each for the outputs.
    unsafe {
        launch(
            kernel,
            (blocks(l.rows as i64, 8), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}

/// Rows (output columns) up to which a one-token f32 projection runs on `router_fused`'s GEMV
/// (the router: 256 experts; a longer f32 projection keeps `gemv_f32`).
pub(crate) const ROUTER_GEMV_MAX_N: usize = 1024;
/// Rows of a `router_fused` block and its threads (router.cu `ROUTER_ROWS`, `ROUTER_THREADS`).
const ROUTER_ROWS: usize = 4;
const ROUTER_THREADS: u32 = 256;

/// Token rows up to which an f32 projection runs on `router_fused` (one grid row each, one
/// counter each: the backend's counter buffer holds this many): a decode step and a
/// verification batch (`delta::STEP_MAX_T` tokens at most), so each token of a batch gets a
/// one-token step's logits, ids and weights bit for bit.
pub(crate) const ROUTER_MAX_M: usize = 16;

/// A projection of `m` token rows of `ty` weights: weight at `w` (`n` rows of `row_bytes`, K =
/// `k`), input rows at `x` (row stride `ldx` floats), plain layout. Whether it runs on
/// `router_fused` (`TALLY_ROUTER_FUSE`, on by default): both the router node alone and the
/// router fused with its top-k ask this, so that a fused and an unfused run compute the logits
/// alike.
pub(crate) fn runs_router_gemv(
    b: &CudaBackend,
    ty: tally_gguf::GgmlType,
    (w, row_bytes, n, k): (u64, usize, usize, usize),
    (x, ldx): (u64, i64),
    m: usize,
    plain: bool,
) -> bool {
    b.options.router_fuse
        && ty == tally_gguf::GgmlType::F32
        && (1..=ROUTER_MAX_M).contains(&m)
        && (m == 1 || (ldx >= k as i64 && ldx % 4 == 0))
        && plain
        && (1..=ROUTER_GEMV_MAX_N).contains(&n)
        && k >= 4
        && k % 4 == 0
        && row_bytes >= 4 * k
        && row_bytes % 16 == 0
        && (w | x) % 16 == 0
}

/// `router_fused` over `n` weight rows and `m` token rows (`x`, `y`: pointer and row stride): the
/// logits alone into `y`, or with `topk` (the ids' and weights' pointers, their row stride, k)
/// the top-k too. The caller checked [`runs_router_gemv`]; with `topk`, n <= 256 and k <= 16.
pub(crate) fn router_gemv(
    b: &CudaBackend,
    (w, row_bytes, n, k): (u64, usize, usize, usize),
    m: usize,
    (x, ldx): (u64, i64),
    (y, ldy): (u64, i64),
    topk: Option<(u64, u64, i64, usize)>,
) -> Result<(), EngineError> {
    let counter = match (topk, b.router_counter.as_ref()) {
        (None, _) => 0,
        (Some(_), Some(c)) => c.ptr,
        (Some(_), None) => {
            return Err(EngineError::Internal(
                "the router's block counter is not allocated (no prepare before the launch)".into(),
            ));
        }
    };
    let (ids, wts, ldt, top) = topk.unwrap_or((0, 0, 0, 0));
    if m == 0 || m > ROUTER_MAX_M {
        return Err(EngineError::Internal(format!(
            "router_fused over {m} token rows (1 to {ROUTER_MAX_M})"
        )));
    }
    if top > 0 && (n > 256 || top > 16) {
        return Err(EngineError::Internal(format!(
            "router_fused's top-{top} of {n} rows exceeds its limits (256, 16)"
        )));
    }
    let a = RouterArgs {
        x,
        w,
        ldw: (row_bytes / 4) as i64,
        logits: y,
        ids,
        wts,
        counter,
        experts: n as i32,
        k_dim: k as i32,
        k: top as i32,
        ldt: ldt as i32,
        ldx,
        ldl: ldy,
    };
    // One row on router_fused, whose code is as before the rows (a decode step); more on
    // router_fused_rows (the same body per row).
    let kernel = if m == 1 {
        b.kernels.router_fused
    } else {
        b.kernels.router_fused_rows
    };
    // SAFETY: RouterArgs mirrors router.cu's struct (layout asserted at kernel build). Grid:
    // one block of ROUTER_THREADS per ROUTER_ROWS rows, grid.y the m token rows; it reads n
    // rows of K f32 at w (the caller's weight, >= n rows of row_bytes >= 4K, 16-byte aligned as
    // runs_router_gemv checked) and m rows of K f32 at x (row stride ldx, a multiple of 4 >= K),
    // writes m rows of n logits at y (the node's output view); with a top-k, m rows of k ids
    // and weights (the TopK node's outputs, row stride ldt) and m of the backend's zeroed
    // counters (ROUTER_MAX_M of them, m <= ROUTER_MAX_M checked above), each of which the last
    // block of its row sets back to 0.
    unsafe {
        launch(
            kernel,
            (n.div_ceil(ROUTER_ROWS) as u32, m as u32, 1),
            (ROUTER_THREADS, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
