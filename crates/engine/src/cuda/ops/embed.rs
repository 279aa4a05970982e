//! The token embedding lookup (`Op::Embed`; reference `cpu/ops/embed.rs`): `dequant_rows` (in
//! `kernels/quant.cuh`, compiled with gemm.cu) decodes the rows of the ids.

use tally_model::Plan;

use super::Io;
use super::matmul::qt;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::DequantRowsArgs;
use crate::cuda::launch::{blocks, launch};

pub fn embed(b: &CudaBackend, plan: &Plan, index: usize, io: &Io) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let w = b.weights.of(plan, index, 0)?;
    let ids = node.inputs[0];
    let a = DequantRowsArgs {
        w: w.buf.ptr,
        row_bytes: w.row_bytes as i64,
        ty: qt(w.ty),
        k: w.dims[0] as i32,
        n_rows_w: w.dims[1] as i32,
        row_ids: io.ins[0].0,
        row0: 0,
        n_rows: ids.rows as i32,
        out: io.outs[0].0,
        ldo: io.outs[0].1,
        err: 0,
    };
    let grid = (blocks(w.dims[0] as i64, 2048), ids.rows as u32, 1);
    // SAFETY: DequantRowsArgs mirrors quant.cuh's struct (layout asserted at kernel build). One
    // block row per id; the kernel checks every id against n_rows_w (the weight's rows) and
    // writes K values per output row of the node's T x K view; the ids are the plan's T x 1 i32
    // token buffer.
    unsafe {
        launch(
            b.kernels.dequant_rows,
            grid,
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
