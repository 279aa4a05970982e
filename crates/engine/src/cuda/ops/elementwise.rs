//! Element-wise ops (reference `cpu/ops/elementwise.rs`), all in `kernels/elementwise.cu`: the
//! binary maps, the shared-expert gate and the delta-rule gates.

use tally_model::{Node, Plan};

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::{BinaryArgs, DeltaGatesArgs, SharedGateArgs};
use crate::cuda::launch::{blocks, launch};

/// The maps of `binary_map` (its `BinaryOp` codes).
#[derive(Debug, Clone, Copy)]
pub enum Binary {
    Add = 0,
    MulSilu = 1,
    MulSigmoid = 2,
    SwiGlu = 3,
}

pub fn binary(b: &CudaBackend, node: &Node, io: &Io, op: Binary) -> Result<(), EngineError> {
    let v_out = node.outputs[0];
    let a = BinaryArgs {
        a: io.ins[0].0,
        lda: io.ins[0].1,
        b: io.ins[1].0,
        ldb: io.ins[1].1,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        rows: v_out.rows as i32,
        cols: v_out.cols as i32,
        op: op as i32,
    };
    let n = (v_out.rows * v_out.cols) as i64;
    // SAFETY: BinaryArgs mirrors elementwise.cu's struct (layout asserted at kernel build). One
    // thread per output element (the kernel returns past rows * cols); both inputs and the
    // output are the node's views of the output's shape in buffers `prepare` sized.
    unsafe {
        launch(
            b.kernels.binary_map,
            (blocks(n, 256), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}

/// Threads of a `shared_gate` block over `rows` rows (one block per row); the fused
/// `add_rms_norm` with the gate must take the same count for the same sums.
pub(crate) fn shared_gate_threads(rows: usize) -> u32 {
    if rows < 64 { 1024 } else { 256 }
}

pub fn shared_gate(b: &CudaBackend, plan: &Plan, index: usize, io: &Io) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let x = node.inputs[0];
    let w = b.weights.of(plan, index, 0)?;
    if w.elems() < x.cols {
        return Err(EngineError::Internal(format!(
            "shared gate weight {} holds {} values for rows of {}",
            w.name,
            w.elems(),
            x.cols
        )));
    }
    let a = SharedGateArgs {
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        s: io.ins[1].0,
        lds: io.ins[1].1,
        w: w.buf.ptr,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        rows: x.rows as i32,
        cols: x.cols as i32,
    };
    // SAFETY: SharedGateArgs mirrors elementwise.cu's struct (layout asserted at kernel build).
    // One block per row of x; x, s and y are the node's views of rows x cols in buffers `prepare`
    // sized, w a device weight of at least `cols` values (checked above).
    unsafe {
        launch(
            b.kernels.shared_gate,
            (x.rows as u32, 1, 1),
            (shared_gate_threads(x.rows), 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}

pub fn delta_gates(b: &CudaBackend, plan: &Plan, index: usize, io: &Io) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let bv = node.inputs[0];
    let (dt_bias, ssm_a) = (b.weights.of(plan, index, 0)?, b.weights.of(plan, index, 1)?);
    if dt_bias.elems() < bv.cols || ssm_a.elems() < bv.cols {
        return Err(EngineError::Internal(format!(
            "delta gates of {} heads with weights of {} and {} values",
            bv.cols,
            dt_bias.elems(),
            ssm_a.elems()
        )));
    }
    let a = DeltaGatesArgs {
        b: io.ins[0].0,
        ldbin: io.ins[0].1,
        a: io.ins[1].0,
        lda: io.ins[1].1,
        dt_bias: dt_bias.buf.ptr,
        ssm_a: ssm_a.buf.ptr,
        beta: io.outs[0].0,
        ldbeta: io.outs[0].1,
        g: io.outs[1].0,
        ldg: io.outs[1].1,
        t: bv.rows as i32,
        h: bv.cols as i32,
    };
    let n = (bv.rows * bv.cols) as i64;
    // SAFETY: DeltaGatesArgs mirrors elementwise.cu's struct (layout asserted at kernel build).
    // A grid-stride loop over the T x H elements (any grid is in bounds); b, a, beta and g are
    // the node's T x H views in buffers `prepare` sized, dt_bias and ssm_a device weights of at
    // least H values (checked above).
    unsafe {
        launch(
            b.kernels.delta_gates,
            (blocks(n, 256).min(4096), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
