//! Reference semantics of every op, one op family per file, with one flat dispatch on the op kind.
//! Inputs arrive gathered into contiguous matrices; outputs are contiguous and pre-poisoned.

mod attention;
mod conv;
mod delta;
mod elementwise;
mod embed;
mod kv_store;
mod matmul;
mod moe;
mod norm;
mod rope;
mod router;

use tally_gguf::GgmlType;
use tally_model::Op;

use super::{Input, Output};
use crate::EngineError;

/// A contiguous row-major f32 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Mat {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Mat {
    pub fn filled(rows: usize, cols: usize, v: f32) -> Mat {
        Mat {
            data: vec![v; rows * cols],
            rows,
            cols,
        }
    }
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// A weight tensor as stored in the file (ggml dims: `dims[0]` is the row length).
#[derive(Debug, Clone, Copy)]
pub struct Weight<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub dims: &'a [u64],
    pub bytes: &'a [u8],
}

impl Weight<'_> {
    /// Row length.
    pub fn k(&self) -> usize {
        self.dims[0] as usize
    }
    /// Number of rows (all dims past the first).
    pub fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
    /// The whole tensor as f32 (for small vectors: norms, biases).
    pub fn to_f32(&self) -> Result<Vec<f32>, EngineError> {
        let n = self.k() * self.n_rows();
        let mut out = vec![0.0; n];
        super::dequant_rows(self, 0, self.n_rows(), &mut out)?;
        Ok(out)
    }
}

/// Sum of products with eight independent accumulators (vectorises; a fixed order, so results
/// are reproducible run to run).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn out_f(outs: &mut [Output], i: usize) -> Result<&mut Mat, EngineError> {
    match outs.get_mut(i) {
        Some(Output::F(m)) => Ok(m),
        _ => Err(EngineError::Internal(format!("output {i} is not f32"))),
    }
}

fn arity(op: &Op, ins: &[Input], ws: &[Weight<'_>], outs: &[Output]) -> Result<(), EngineError> {
    let (ni, nw, no) = match op {
        Op::Embed => (1, 1, 1),
        Op::RmsNorm { .. } => (1, 1, 1),
        Op::L2Norm { .. } => (1, 0, 1),
        Op::MatMul { .. } => (1, 1, 1),
        Op::Add | Op::MulSilu | Op::MulSigmoid | Op::SwiGlu => (2, 0, 1),
        Op::ConvSilu => (2, 1, 2),
        Op::DeltaGates => (2, 2, 2),
        Op::DeltaRule { .. } => (6, 0, 2),
        Op::Rope { .. } => (2, 0, 1),
        Op::KvStore => (3, 0, 2),
        Op::Attention { .. } => (4, 0, 1),
        Op::TopK { .. } => (1, 0, 2),
        Op::MoeMatMul { .. } => (2, 1, 1),
        Op::MoeCombine { .. } => (2, 0, 1),
        Op::SharedGate => (2, 1, 1),
    };
    if ins.len() != ni || ws.len() != nw || outs.len() != no {
        return Err(EngineError::Internal(format!(
            "{} takes {ni} inputs, {nw} weights, {no} outputs; got {}, {}, {}",
            op.name(),
            ins.len(),
            ws.len(),
            outs.len()
        )));
    }
    Ok(())
}

/// Runs one op.
pub fn run(
    op: &Op,
    ins: &[Input],
    ws: &[Weight<'_>],
    outs: &mut [Output],
) -> Result<(), EngineError> {
    arity(op, ins, ws, outs)?;
    match op {
        Op::Embed => embed::embed(ins[0].i()?, &ws[0], out_f(outs, 0)?),
        Op::RmsNorm { eps, group } => {
            norm::rms_norm(ins[0].f()?, &ws[0], *eps, *group, out_f(outs, 0)?)
        }
        Op::L2Norm { eps, group, scale } => {
            norm::l2_norm(ins[0].f()?, *eps, *group, *scale, out_f(outs, 0)?)
        }
        Op::MatMul { layout } => matmul::matmul(ins[0].f()?, &ws[0], *layout, out_f(outs, 0)?),
        Op::Add => elementwise::binary(ins[0].f()?, ins[1].f()?, out_f(outs, 0)?, |a, b| a + b),
        Op::MulSilu => elementwise::binary(ins[0].f()?, ins[1].f()?, out_f(outs, 0)?, |a, b| {
            a * silu(b)
        }),
        Op::MulSigmoid => elementwise::binary(ins[0].f()?, ins[1].f()?, out_f(outs, 0)?, |a, b| {
            a * sigmoid(b)
        }),
        Op::SwiGlu => elementwise::binary(ins[0].f()?, ins[1].f()?, out_f(outs, 0)?, |g, u| {
            silu(g) * u
        }),
        Op::ConvSilu => {
            let (y, st) = two_outs(outs)?;
            conv::conv_silu(ins[0].f()?, ins[1].f()?, &ws[0], y, st)
        }
        Op::DeltaGates => {
            let (beta, g) = two_outs(outs)?;
            elementwise::delta_gates(ins[0].f()?, ins[1].f()?, &ws[0], &ws[1], beta, g)
        }
        Op::DeltaRule {
            k_heads,
            v_heads,
            k_dim,
            v_dim,
        } => {
            let (o, st) = two_outs(outs)?;
            let shape = delta::Heads {
                k_heads: *k_heads,
                v_heads: *v_heads,
                k_dim: *k_dim,
                v_dim: *v_dim,
            };
            delta::delta_rule(
                &shape,
                [
                    ins[0].f()?,
                    ins[1].f()?,
                    ins[2].f()?,
                    ins[3].f()?,
                    ins[4].f()?,
                    ins[5].f()?,
                ],
                o,
                st,
            )
        }
        Op::Rope {
            head_dim,
            dims,
            theta,
            offset,
        } => rope::rope(
            ins[0].f()?,
            *head_dim,
            *dims,
            *theta,
            position(&ins[1])? + offset,
            out_f(outs, 0)?,
        ),
        Op::KvStore => {
            // The backend narrowed the cache views to rows pos..pos+T: a copy.
            let (kc, vc) = two_outs(outs)?;
            kv_store::kv_store(ins[0].f()?, ins[1].f()?, kc, vc)
        }
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            scale,
            q_offset,
        } => attention::attention(
            ins[0].f()?,
            ins[1].f()?,
            ins[2].f()?,
            attention::Shape {
                n_head: *n_head,
                n_head_kv: *n_head_kv,
                head_dim: *head_dim,
                scale: *scale,
                q_offset: position(&ins[3])? + q_offset,
            },
            out_f(outs, 0)?,
        ),
        Op::TopK { k } => {
            let (a, b) = outs.split_at_mut(1);
            match (&mut a[0], &mut b[0]) {
                (Output::I(ids), Output::F(w)) => router::topk(ins[0].f()?, *k, ids, w),
                _ => Err(EngineError::Internal("topk outputs are (i32, f32)".into())),
            }
        }
        Op::MoeMatMul { k, pair_input } => moe::moe_matmul(
            ins[0].f()?,
            ins[1].i()?,
            &ws[0],
            *k,
            *pair_input,
            out_f(outs, 0)?,
        ),
        Op::MoeCombine { k } => moe::combine(ins[0].f()?, ins[1].f()?, *k, out_f(outs, 0)?),
        Op::SharedGate => {
            elementwise::shared_gate(ins[0].f()?, ins[1].f()?, &ws[0], out_f(outs, 0)?)
        }
    }
}

/// The batch position from a `[1, 1]` i32 input.
fn position(inp: &Input) -> Result<usize, EngineError> {
    let p = inp.i()?.data.first().copied().unwrap_or(-1);
    usize::try_from(p).map_err(|_| EngineError::Internal(format!("batch position {p}")))
}

fn two_outs(outs: &mut [Output]) -> Result<(&mut Mat, &mut Mat), EngineError> {
    let (a, b) = outs.split_at_mut(1);
    match (&mut a[0], &mut b[0]) {
        (Output::F(x), Output::F(y)) => Ok((x, y)),
        _ => Err(EngineError::Internal("expected two f32 outputs".into())),
    }
}
