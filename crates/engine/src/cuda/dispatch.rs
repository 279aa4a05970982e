//! One flat dispatch on the op kind: each plan node becomes one or a few kernel launches.

use std::collections::HashMap;

use cudarc::driver::result;
use tally_model::{Node, Op, Plan};

use super::args::*;
use super::launch::{Kernel, blocks, launch};
use super::mem::cuda_err;
use super::{CudaBackend, ops_big};
use crate::EngineError;
use crate::backend::Target;

/// Kernels each source file defines (loaded by name at start-up).
pub fn kernel_names(source: &str) -> &'static [&'static str] {
    match source {
        "ops" => &[
            "norm_rows",
            "rope_neox",
            "kv_store",
            "binary_map",
            "router_topk",
            "moe_combine",
            "shared_gate",
        ],
        "sample" => super::sample::KERNELS,
        other => ops_big::kernel_names(other),
    }
}

/// Per-kernel attributes (dynamic shared memory limits) set once after loading.
pub fn configure_kernels(k: &HashMap<&'static str, Kernel>) -> Result<(), EngineError> {
    ops_big::configure_kernels(k)
}

/// Zeroes `bytes` at `ptr` on the backend's stream and waits.
pub fn zero(b: &CudaBackend, ptr: u64, bytes: usize) -> Result<(), EngineError> {
    // SAFETY: `ptr..ptr+bytes` is a live allocation of the backend.
    unsafe {
        result::memset_d8_async(ptr, 0, bytes, b.cu_stream()).map_err(cuda_err)?;
    }
    b.sync()
}

/// Device address and leading dimension of each input and output of a node; outputs go to
/// scratch (leading dimension = the view's width) for a replay.
pub struct Io {
    pub ins: Vec<(u64, i64)>,
    pub outs: Vec<(u64, i64)>,
}

fn io(b: &mut CudaBackend, plan: &Plan, node: &Node, target: Target) -> Result<Io, EngineError> {
    let ins = node
        .inputs
        .iter()
        .map(|v| b.view(plan, v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outs = Vec::with_capacity(node.outputs.len());
    for (slot, v) in node.outputs.iter().enumerate() {
        outs.push(match target {
            Target::Real => b.view(plan, v)?,
            Target::Scratch => {
                let bytes = v.elems() * plan.buf(v.buf).dtype.size_bytes();
                (b.scratch(slot, bytes)?, v.cols as i64)
            }
        });
    }
    Ok(Io { ins, outs })
}

/// For replay of an op that updates state in place: copy the real state into the scratch slot
/// first, so the kernel reads the same state and writes only scratch.
fn stage_state(
    b: &mut CudaBackend,
    plan: &Plan,
    node: &Node,
    io: &Io,
    slot: usize,
    target: Target,
) -> Result<(), EngineError> {
    if target == Target::Scratch {
        let v = node.outputs[slot];
        let (real, _) = b.view(plan, &v)?;
        let bytes = v.elems() * 4;
        // SAFETY: both ranges are live device allocations of at least `bytes`.
        unsafe {
            result::memcpy_dtod_async(io.outs[slot].0, real, bytes, b.cu_stream())
                .map_err(cuda_err)?;
        }
    }
    Ok(())
}

pub fn dispatch(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    target: Target,
) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let io = io(b, plan, node, target)?;
    let s = b.cu_stream();
    let v_in = |i: usize| node.inputs[i];
    let v_out = node.outputs[0];
    match &node.op {
        Op::RmsNorm { eps, group } | Op::L2Norm { eps, group, .. } => {
            let (w, l2, scale) = match &node.op {
                Op::RmsNorm { .. } => (b.weight(&node.weights[0])?.buf.ptr, 0, 1.0),
                Op::L2Norm { scale, .. } => (0, 1, *scale),
                _ => unreachable!("matched above"),
            };
            let x = v_in(0);
            let a = NormArgs {
                x: io.ins[0].0,
                ldx: io.ins[0].1,
                w,
                y: io.outs[0].0,
                ldy: io.outs[0].1,
                rows: x.rows as i32,
                cols: x.cols as i32,
                group: *group as i32,
                eps: *eps,
                scale,
                l2,
            };
            let groups = (x.rows * (x.cols / group)) as u32;
            let threads = if *group >= 1024 { 256 } else { 128 };
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("norm_rows")?,
                    (groups, 1, 1),
                    (threads, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::Rope {
            head_dim,
            dims,
            theta,
            offset,
        } => {
            let x = v_in(0);
            let a = RopeArgs {
                x: io.ins[0].0,
                ldx: io.ins[0].1,
                y: io.outs[0].0,
                ldy: io.outs[0].1,
                rows: x.rows as i32,
                n_heads: (x.cols / head_dim) as i32,
                head_dim: *head_dim as i32,
                dims: *dims as i32,
                pos0: *offset as i32,
                theta: *theta,
                pos: io.ins[1].0,
            };
            let n = (x.rows * x.cols) as i64;
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("rope_neox")?,
                    (blocks(n, 256), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::Add | Op::MulSilu | Op::MulSigmoid | Op::SwiGlu => {
            let op = match node.op {
                Op::Add => BIN_ADD,
                Op::MulSilu => BIN_MUL_SILU,
                Op::MulSigmoid => BIN_MUL_SIGMOID,
                _ => BIN_SWIGLU,
            };
            let a = BinaryArgs {
                a: io.ins[0].0,
                lda: io.ins[0].1,
                b: io.ins[1].0,
                ldb: io.ins[1].1,
                y: io.outs[0].0,
                ldy: io.outs[0].1,
                rows: v_out.rows as i32,
                cols: v_out.cols as i32,
                op,
            };
            let n = (v_out.rows * v_out.cols) as i64;
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("binary_map")?,
                    (blocks(n, 256), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::TopK { k } => {
            let l = v_in(0);
            let a = TopkArgs {
                logits: io.ins[0].0,
                ld: io.ins[0].1,
                ids: io.outs[0].0,
                ld_ids: io.outs[0].1,
                w: io.outs[1].0,
                ld_w: io.outs[1].1,
                rows: l.rows as i32,
                experts: l.cols as i32,
                k: *k as i32,
            };
            if l.cols > 1024 || *k > 16 {
                return Err(EngineError::Unsupported(format!(
                    "router top-{k} of {} experts exceeds the kernel's limits (1024, 16)",
                    l.cols
                )));
            }
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("router_topk")?,
                    (blocks(l.rows as i64, 8), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::MoeCombine { k } => {
            let a = CombineArgs {
                y: io.ins[0].0,
                ldy: io.ins[0].1,
                w: io.ins[1].0,
                ldw: io.ins[1].1,
                out: io.outs[0].0,
                ldo: io.outs[0].1,
                rows: v_out.rows as i32,
                cols: v_out.cols as i32,
                k: *k as i32,
            };
            let n = (v_out.rows * v_out.cols) as i64;
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("moe_combine")?,
                    (blocks(n, 256), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::SharedGate => {
            let x = v_in(0);
            let a = SharedGateArgs {
                x: io.ins[0].0,
                ldx: io.ins[0].1,
                s: io.ins[1].0,
                lds: io.ins[1].1,
                w: b.weight(&node.weights[0])?.buf.ptr,
                y: io.outs[0].0,
                ldy: io.outs[0].1,
                rows: x.rows as i32,
                cols: x.cols as i32,
            };
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("shared_gate")?,
                    (x.rows as u32, 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::KvStore => {
            let k = v_in(0);
            let cap = node.outputs[0].rows.min(node.outputs[1].rows);
            let a = KvStoreArgs {
                k: io.ins[0].0,
                ldk: io.ins[0].1,
                v: io.ins[1].0,
                ldv: io.ins[1].1,
                kc: io.outs[0].0,
                ldkc: io.outs[0].1,
                vc: io.outs[1].0,
                ldvc: io.outs[1].1,
                pos: io.ins[2].0,
                rows: k.rows as i32,
                cols: k.cols as i32,
                cap: cap as i32,
            };
            let n = (k.rows * k.cols) as i64;
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("kv_store")?,
                    (blocks(n, 256), 2, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::ConvSilu | Op::DeltaRule { .. } => {
            stage_state(b, plan, node, &io, 1, target)?;
            ops_big::dispatch(b, node, &io)
        }
        Op::Embed
        | Op::MatMul { .. }
        | Op::MoeMatMul { .. }
        | Op::DeltaGates
        | Op::Attention { .. } => ops_big::dispatch(b, node, &io),
    }
}
