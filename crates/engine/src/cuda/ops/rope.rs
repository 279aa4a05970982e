//! NeoX RoPE (`Op::Rope`; reference `cpu/ops/rope.rs`): `rope_neox` of `kernels/rope.cu`, the
//! batch position read from the device.

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::RopeArgs;
use crate::cuda::launch::{blocks, launch};

pub fn rope(
    b: &CudaBackend,
    node: &Node,
    io: &Io,
    (head_dim, dims, theta, offset): (usize, usize, f32, usize),
) -> Result<(), EngineError> {
    let x = node.inputs[0];
    let a = RopeArgs {
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        rows: x.rows as i32,
        n_heads: (x.cols / head_dim) as i32,
        head_dim: head_dim as i32,
        dims: dims as i32,
        offset: offset as i32,
        theta,
        pos: io.ins[1].0,
    };
    let n = (x.rows * x.cols) as i64;
    // SAFETY: RopeArgs mirrors rope.cu's struct (layout asserted at kernel build). One thread per
    // element of the rows x cols input view (the kernel returns past rows * n_heads * head_dim);
    // x and y are the node's views in buffers `prepare` sized, pos the plan's `[1, 1]` i32
    // position buffer.
    unsafe {
        launch(
            b.kernels.rope_neox,
            (blocks(n, 256), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
