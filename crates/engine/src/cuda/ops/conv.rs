//! The causal depthwise conv + SiLU (`Op::ConvSilu`; reference `cpu/ops/conv.rs`): `conv_silu`
//! of `kernels/conv.cu`, updating the carried state in place.

use tally_model::Plan;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::ConvSiluArgs;
use crate::cuda::consts::{CONV_ROWS, CONV_THREADS};
use crate::cuda::launch::{blocks, launch};

pub fn conv_silu(b: &CudaBackend, plan: &Plan, index: usize, io: &Io) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let x = node.inputs[0];
    let w = b.weights.of(plan, index, 0)?;
    let k = w.dims[0] as usize;
    if w.elems() < x.cols * k || node.inputs[1].rows + 1 < k {
        return Err(EngineError::Internal(format!(
            "conv of {} channels with weight {} ({} values, {k} taps) and {} state rows",
            x.cols,
            w.name,
            w.elems(),
            node.inputs[1].rows
        )));
    }
    let a = ConvSiluArgs {
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        state: io.outs[1].0,
        lds: io.outs[1].1,
        w: w.buf.ptr,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        t: x.rows as i32,
        c: x.cols as i32,
        k: k as i32,
        pad0: 0,
        snap: 0,
        snap_ld: 0,
    };
    let mut a = a;
    (a.snap, a.snap_ld) = b.token_states_for(io.outs[1].0, x.rows);
    let grid = (
        blocks(x.cols as i64, 4 * CONV_THREADS),
        blocks(x.rows as i64, CONV_ROWS as u32),
        1,
    );
    // SAFETY: ConvSiluArgs mirrors conv.cu's struct (layout asserted at kernel build). The grid
    // covers C channels in 4 * CONV_THREADS and T tokens in CONV_ROWS, the constants the kernel
    // was built with (consts.rs); x and y are the node's T x C views, state its K-1 x C view
    // (real, or the replay's staged copy), w a device weight of C x K values (checked above);
    // snap, when set, is T copies of the whole state buffer at the view's offset
    // (token_states_for: 2 <= T <= the copies kept).
    unsafe {
        launch(
            b.kernels.conv_silu,
            grid,
            (CONV_THREADS, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
