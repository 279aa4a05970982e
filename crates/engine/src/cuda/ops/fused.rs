//! Launches that run several consecutive plan nodes at once, on the plain path only (the
//! executor asks for them when no hook watches the nodes: [`crate::exec::Hook::fuses`]; the
//! ledger's observe and replay runs, and `tally check`, dispatch node by node). Every fused
//! launch writes every output of the nodes it covers, with the same arithmetic in the same order
//! as their own kernels, so buffers and logits are bit-identical to the unfused run (the GPU
//! scripts compare the two). `TALLY_NO_FUSE=1` turns them off.
//!
//! - gate, up, SwiGlu: two projections of the same input through weights of one type and shape,
//!   then `silu(gate) * up`. At one row (decode) both run on `gemv_<t>`; its paired mode takes row
//!   n of both weights in one warp (`GemmArgs::w2`), dense (the shared expert) or per routed
//!   expert (one-row tiles from the router's ids). Two launches fewer per FFN.
//! - two projections of the same input through weights of one type and shape, not followed by
//!   their SwiGlu (beta and alpha of the linear-attention layers, k and v of the full-attention
//!   ones where their types agree): the same paired launch without the third output.
//! - residual add, RMS norm of the sum over whole rows: `add_rms_norm` (kernels/norm.cu); also
//!   with the add before it (the FFN's routed + shared output, then the residual).

use tally_model::{Node, Op, OutLayout, Plan};

use super::matmul::{gemv_grid, runs_gemv};
use super::moe::runs_direct_gemv;
use super::norm::norm_threads;
use super::{Io, io};
use crate::EngineError;
use crate::backend::Target;
use crate::cuda::CudaBackend;
use crate::cuda::args::{AddNormArgs, GemmArgs};
use crate::cuda::launch::launch;

/// Runs nodes `index..` of `plan` as one fused launch if they match a pattern: the number of
/// nodes covered, or 0 (nothing launched; dispatch node `index` alone).
pub fn dispatch(b: &mut CudaBackend, plan: &Plan, index: usize) -> Result<usize, EngineError> {
    if !b.options.fuse {
        return Ok(0);
    }
    if let Some((g, u, act)) = gate_up_nodes(plan, index) {
        if paired(b, plan, index, (g, u, Some(act)))? {
            return Ok(3);
        }
    }
    if let Some((g, u)) = pair_nodes(plan, index) {
        if paired(b, plan, index, (g, u, None))? {
            return Ok(2);
        }
    }
    if let Some(nodes) = add_norm_nodes(plan, index) {
        return add_norm(b, plan, index, nodes);
    }
    Ok(0)
}

/// The three nodes gate, up, SwiGlu(gate, up) at `index`, if they are that.
fn gate_up_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node, &Node)> {
    let (g, u, act) = (
        plan.nodes.get(index)?,
        plan.nodes.get(index + 1)?,
        plan.nodes.get(index + 2)?,
    );
    let joined = act.op == Op::SwiGlu
        && act.inputs.len() == 2
        && g.outputs.len() == 1
        && u.outputs.len() == 1
        && act.inputs[0] == g.outputs[0]
        && act.inputs[1] == u.outputs[0]
        && g.inputs == u.inputs
        && g.op == u.op;
    let projections = matches!(
        g.op,
        Op::MatMul {
            layout: OutLayout::Plain
        } | Op::MoeMatMul {
            pair_input: false,
            ..
        }
    );
    (joined && projections).then_some((g, u, act))
}

/// Two projections at `index` of one input that a paired launch can run (plain layout), when
/// the node after them is not their SwiGlu (that is [`gate_up_nodes`]).
fn pair_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node)> {
    let (g, u) = (plan.nodes.get(index)?, plan.nodes.get(index + 1)?);
    let joined = g.inputs == u.inputs
        && g.op == u.op
        && g.outputs.len() == 1
        && u.outputs.len() == 1
        && matches!(
            g.op,
            Op::MatMul {
                layout: OutLayout::Plain
            }
        );
    joined.then_some((g, u))
}

/// The paired `gemv_<t>` launch of nodes `index` and `index + 1` (and their SwiGlu `act`), if
/// their weights and shapes allow it; false (nothing launched) otherwise.
fn paired(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (g, u, act): (&Node, &Node, Option<&Node>),
) -> Result<bool, EngineError> {
    let (wg, wu) = (
        b.weights.of(plan, index, 0)?,
        b.weights.of(plan, index + 1, 0)?,
    );
    if wg.ty != wu.ty || wg.dims != wu.dims || wg.row_bytes != wu.row_bytes {
        return Ok(false);
    }
    let rows = g.inputs[0].rows;
    let moe_k = match g.op {
        Op::MoeMatMul { k, .. } => Some(k),
        _ => None,
    };
    let gemv = match moe_k {
        Some(k) => runs_direct_gemv(wg, g.inputs[1].rows, k),
        None => runs_gemv(b, wg, rows)?,
    };
    if !gemv {
        return Ok(false);
    }
    let (ty, k, n) = (wg.ty, wg.dims[0] as usize, wg.dims[1] as usize);
    let full = |w: &crate::cuda::DevWeight| {
        let experts = w.dims.get(2).copied().unwrap_or(1) as usize;
        w.buf.bytes >= w.row_bytes * n * experts
    };
    if !full(wg) || !full(wu) {
        return Ok(false); // let the unfused launches report it
    }
    let (wptr, uptr, row_bytes, experts) = (
        wg.buf.ptr,
        wu.buf.ptr,
        wg.row_bytes as i64,
        wg.dims.get(2).copied().unwrap_or(1) as i32,
    );
    let set = *b.kernels.gemm_set(ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} weights ({})", ty.name(), g.name))
    })?;
    let (gi, ui): (Io, Io) = (io(b, plan, g, Target::Real)?, io(b, plan, u, Target::Real)?);
    let (y3, ldy3) = match act {
        Some(act) => io(b, plan, act, Target::Real)?.outs[0],
        None => (0, 0),
    };
    let (m, tiles, x_div, tile_expert, w_expert_bytes) = match moe_k {
        Some(kk) => {
            let ids = gi.ins[1];
            if ids.1 != kk as i64 {
                return Ok(false);
            }
            let pairs = g.inputs[1].rows * kk;
            (pairs, pairs, kk as i32, ids.0, row_bytes * n as i64)
        }
        None => (rows, rows, 1, 0, 0),
    };
    let a = GemmArgs {
        w: wptr,
        w_row_bytes: row_bytes,
        w_expert_bytes,
        x: gi.ins[0].0,
        ldx: gi.ins[0].1,
        y: gi.outs[0].0,
        ldy: gi.outs[0].1,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        sorted_rows: 0,
        x_div,
        tile_expert,
        tile_start: 0,
        tile_rows: 0,
        layout: 0,
        head_dim: 0,
        n_head: 0,
        n_expert: if moe_k.is_some() { experts } else { 0 },
        w2: uptr,
        y2: ui.outs[0].0,
        ldy2: ui.outs[0].1,
        y3,
        ldy3,
    };
    // Paired mode: one output column (2 weight rows) per warp.
    let (gx, threads) = gemv_grid(n, 1, tiles, b.props.sm_count);
    let grid = (gx, tiles as u32, 1);
    // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). gemv_<t> in
    // paired mode: grid.x covers the N output columns at threads / 32 per block (at most
    // GEMV_THREADS, the launch bound), grid.y the M rows (dense) or the T*k one-row tiles, pair t
    // of expert ids[t] (the contiguous T x k view checked above, experts < n_expert). Both
    // weights hold N rows (x E experts) of row_bytes (checked above), x is the shared input view,
    // y and y2 the two projections' output views and y3 the SwiGlu node's (or null), in buffers
    // `prepare` sized.
    unsafe { launch(set.gemv, grid, (threads, 1, 1), 0, b.cu_stream(), &a) }?;
    Ok(true)
}

/// Add, RmsNorm(its sum) over whole rows at `index`, or Add, Add(one of its inputs the first's
/// sum), RmsNorm: the nodes and how many there are.
type AddNorm<'p> = (Option<&'p Node>, &'p Node, &'p Node);

fn add_norm_nodes(plan: &Plan, index: usize) -> Option<AddNorm<'_>> {
    let is_add = |n: &Node| n.op == Op::Add && n.inputs.len() == 2 && n.outputs.len() == 1;
    let ends = |add: &Node, norm: &Node| {
        let out = add.outputs[0];
        matches!(norm.op, Op::RmsNorm { group, .. } if group == out.cols)
            && norm.inputs.first() == Some(&out)
    };
    let (first, second) = (plan.nodes.get(index)?, plan.nodes.get(index + 1)?);
    if !is_add(first) {
        return None;
    }
    if ends(first, second) {
        return Some((None, first, second));
    }
    let norm = plan.nodes.get(index + 2)?;
    let chained = is_add(second) && second.inputs.contains(&first.outputs[0]);
    (chained && ends(second, norm)).then_some((Some(first), second, norm))
}

fn add_norm(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (first, add, norm): AddNorm<'_>,
) -> Result<usize, EngineError> {
    let Op::RmsNorm { eps, group } = norm.op else {
        return Ok(0);
    };
    let covered = if first.is_some() { 3 } else { 2 };
    let w = b.weights.of(plan, index + covered - 1, 0)?;
    if w.elems() < group {
        return Ok(0); // the unfused norm reports it
    }
    let wptr = w.buf.ptr;
    let out = add.outputs[0];
    let (ai, ni) = (
        io(b, plan, add, Target::Real)?,
        io(b, plan, norm, Target::Real)?,
    );
    // One add: sum = a + b. Two: mid = a + b (the first add), sum = mid + c, c being the second
    // add's other input.
    let (x, y, c, mid) = match first {
        None => (ai.ins[0], ai.ins[1], (0, 0), (0, 0)),
        Some(f) => {
            let fi = io(b, plan, f, Target::Real)?;
            let other = usize::from(add.inputs[0] == f.outputs[0]);
            (fi.ins[0], fi.ins[1], ai.ins[other], fi.outs[0])
        }
    };
    let a = AddNormArgs {
        a: x.0,
        lda: x.1,
        b: y.0,
        ldb: y.1,
        c: c.0,
        ldc: c.1,
        mid: mid.0,
        ldm: mid.1,
        sum: ai.outs[0].0,
        lds: ai.outs[0].1,
        w: wptr,
        y: ni.outs[0].0,
        ldy: ni.outs[0].1,
        rows: out.rows as i32,
        cols: out.cols as i32,
        eps,
        pad0: 0,
    };
    let threads = norm_threads(out.rows as u32, group, b.props.sm_count);
    // SAFETY: AddNormArgs mirrors norm.cu's struct (layout asserted at kernel build). One block
    // per row of the add's output view; a, b (and c, mid) are the adds' input and output views,
    // sum and y the last add's and the norm's outputs (rows x cols each), in buffers `prepare`
    // sized; w is the norm weight of at least cols values (checked above).
    unsafe {
        launch(
            b.kernels.add_rms_norm,
            (out.rows as u32, 1, 1),
            (threads, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }?;
    Ok(covered)
}

#[cfg(test)]
mod tests {
    use tally_model::synth::Preset;
    use tally_model::{PlanOptions, build_plan};

    use super::*;

    /// The patterns find what the model has: per layer one routed and one shared gate/up/SwiGlu
    /// triple; the residual add after attention with the post-attention norm, and the FFN's two
    /// adds (routed + shared, then the residual) with the next layer's input norm (the output
    /// norm after the last layer); and the pairs of projections of one input (beta/alpha, k/v
    /// where the weights allow): in a decode step and in a prefill, nothing overlapping.
    #[test]
    fn patterns_match_each_ffn_and_residual_norm() {
        for preset in [Preset::Tiny, Preset::TinyOdd, Preset::Mid] {
            let cfg = preset.config();
            for n in [1, 5] {
                let plan = build_plan(&cfg, n, 64, &PlanOptions::default()).expect("plan");
                let (mut triples, mut add2, mut add3, mut pairs, mut i) = (0, 0, 0, 0, 0);
                while i < plan.nodes.len() {
                    if let Some((g, u, _)) = gate_up_nodes(&plan, i) {
                        assert!(g.name.ends_with("gate_exps") || g.name.ends_with("gate_shexp"));
                        assert!(u.name.ends_with("up_exps") || u.name.ends_with("up_shexp"));
                        triples += 1;
                        i += 3;
                    } else if let Some((first, a, m)) = add_norm_nodes(&plan, i) {
                        assert!(a.name.ends_with("residual"), "{}", a.name);
                        assert!(m.name.ends_with("norm"), "{}", m.name);
                        match first {
                            Some(f) => {
                                assert!(f.name.ends_with("ffn_out"), "{}", f.name);
                                add3 += 1;
                                i += 3;
                            }
                            None => {
                                add2 += 1;
                                i += 2;
                            }
                        }
                    } else {
                        if let Some((g, u)) = pair_nodes(&plan, i) {
                            let names = (g.name.rsplit('.').next(), u.name.rsplit('.').next());
                            pairs += usize::from(matches!(
                                names,
                                (Some("ssm_beta"), Some("ssm_alpha"))
                                    | (Some("attn_k"), Some("attn_v"))
                            ));
                        }
                        i += 1;
                    }
                }
                let layers = cfg.n_layers;
                assert_eq!(triples, 2 * layers, "{preset:?} n={n}");
                assert_eq!((add2, add3), (layers, layers), "{preset:?} n={n}");
                assert_eq!(
                    pairs, layers,
                    "{preset:?} n={n}: beta/alpha or k/v per layer"
                );
            }
        }
    }
}
