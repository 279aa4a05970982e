//! RMS and L2 norms (`Op::RmsNorm`, `Op::L2Norm`; reference `cpu/ops/norm.rs`): `norm_rows` of
//! `kernels/norm.cu`, one block per (row, group).

use tally_model::{Node, Plan};

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::NormArgs;
use crate::cuda::consts::NORM_W_GROUPS;
use crate::cuda::launch::launch;

/// Threads of a norm block over `groups` blocks of `group` values each. A few long rows
/// (decode's hidden-state norms: one row of 2048) get 1024 threads, two values each: with 256,
/// a thread's eight dependent loads were most of an 8 us launch. `add_rms_norm` takes the same
/// count, so its sums are the unfused norm's bit for bit.
pub(crate) fn norm_threads(groups: u32, group: usize, sms: u32) -> u32 {
    if groups < sms && group >= 2048 {
        1024
    } else if group >= 1024 {
        256
    } else {
        128
    }
}

pub fn rms_norm(
    b: &CudaBackend,
    plan: &Plan,
    index: usize,
    io: &Io,
    eps: f32,
    group: usize,
) -> Result<(), EngineError> {
    let w = b.weights.of(plan, index, 0)?;
    if w.elems() < group {
        return Err(EngineError::Internal(format!(
            "norm weight {} holds {} values for groups of {group}",
            w.name,
            w.elems()
        )));
    }
    norm(b, &plan.nodes[index], io, (w.buf.ptr, 0, 1.0), eps, group)
}

pub fn l2_norm(
    b: &CudaBackend,
    node: &Node,
    io: &Io,
    eps: f32,
    group: usize,
    scale: f32,
) -> Result<(), EngineError> {
    norm(b, node, io, (0, 1, scale), eps, group)
}

fn norm(
    b: &CudaBackend,
    node: &Node,
    io: &Io,
    (w, l2, scale): (u64, i32, f32),
    eps: f32,
    group: usize,
) -> Result<(), EngineError> {
    let x = node.inputs[0];
    let a = NormArgs::plain(
        io.ins[0],
        io.outs[0],
        (x.rows, x.cols, group),
        (w, l2, scale),
        eps,
    );
    let groups = (x.rows * (x.cols / group)) as u32;
    let threads = norm_threads(groups, group, b.props.sm_count);
    // SAFETY: one block per (row, group) of the input view; x and y are the node's views of
    // buffers `prepare` sized for this plan (rows x cols within their leading dimensions), w is
    // null (L2) or a device weight of at least `group` values (checked in rms_norm).
    unsafe { launch_norm_rows(b, &a, groups, threads) }
}

/// Launches `norm_rows` with `a` over `blocks` blocks of `threads`: at 128 threads and at
/// least 4 blocks a multiprocessor as `norm_rows_w`, a warp per block's work (`NORM_W_GROUPS`
/// of them a block), bit for bit the same outputs.
///
/// # Safety
/// `a`'s views and weight must be live device memory of the sizes it states, and `blocks` at
/// most the (row, group) pairs of its views (the kernel returns for the rest, but reads `a`'s
/// pointers for every block it runs).
pub(crate) unsafe fn launch_norm_rows(
    b: &CudaBackend,
    a: &NormArgs,
    blocks: u32,
    threads: u32,
) -> Result<(), EngineError> {
    // One warp a group pays where the groups are many (prefill: tens of thousands); at decode
    // (a few dozen) a block each spreads their loads over more multiprocessors.
    let many = blocks >= 4 * b.props.sm_count;
    let mut a = *a;
    a.no_regs = i32::from(!b.options.norm_warp_regs);
    // With the f16 copy (yh), the _h kernels: the same code with its stores.
    let k = &b.kernels;
    let (kernel, grid, block) = match (threads == 128 && many && b.options.norm_warp, a.yh != 0) {
        (true, yh) => {
            let per = NORM_W_GROUPS as u32;
            let k = if yh { k.norm_rows_w_h } else { k.norm_rows_w };
            (k, blocks.div_ceil(per), 32 * per)
        }
        (false, yh) => (
            if yh { k.norm_rows_h } else { k.norm_rows },
            blocks,
            threads,
        ),
    };
    // SAFETY: NormArgs mirrors norm.cu's struct (layout asserted at kernel build); the caller
    // vouches for the memory it points at; norm_rows_w's warps past the last (row, group)
    // return (norm_job), as norm_rows' blocks do.
    unsafe { launch(kernel, (grid, 1, 1), (block, 1, 1), 0, b.cu_stream(), &a) }
}
