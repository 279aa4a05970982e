//! Launches that run several consecutive plan nodes at once, on the plain path only (the
//! executor asks for them when no hook watches the nodes: [`crate::exec::Hook::fuses`]; the
//! ledger's observe and replay runs, and `tally check`, dispatch node by node). Every fused
//! launch writes every output of the nodes it covers that a later node reads (all of them but
//! the in-place q and k norms of the delta step, below), with the same arithmetic in the same
//! order as their own kernels, so logits, and every buffer that is read again, are bit-identical
//! to the unfused run (the GPU scripts compare the two). `TALLY_NO_FUSE=1` turns them off.
//!
//! - gate, up, SwiGlu: two projections of the same input through weights of one type and shape,
//!   then `silu(gate) * up`. At one row (decode) both run on `gemv_<t>`; its paired mode takes row
//!   n of both weights in one warp (`GemmArgs::w2`), dense (the shared expert) or per routed
//!   expert (one-row tiles from the router's ids). Two launches fewer per FFN. The routed and the
//!   shared expert's paired launches (consecutive in the plan, one input) go out as the two
//!   segments of one `gemv_multi_<t>` launch: side by side instead of one after the other; so do
//!   their down projections, on `mmv_multi_<t>`.
//! - two projections of the same input through weights of one type and shape, not followed by
//!   their SwiGlu (beta and alpha of the linear-attention layers, k and v of the full-attention
//!   ones where their types agree): the same paired launch without the third output.
//! - up to four projections of one input through weights of one type (any shapes, plain or
//!   q/gate layout): qkv, z, beta, alpha of a linear-attention layer, q, k (and v where its type
//!   agrees) of a full-attention one, at decode: one `gemv_multi_<t>` launch whose blocks are
//!   split among the projections, each running `gemv_<t>`'s body on its own arguments. Two or
//!   three launches fewer per layer, and a wider grid for the short ones.
//! - residual add, RMS norm of the sum over whole rows: `add_rms_norm` (kernels/norm.cu); also
//!   with the add before it (the FFN's routed + shared output, then the residual), and then also
//!   with the shared-expert gate before that (its dot product and sigmoid in the same block, at
//!   the shared_gate kernel's block size), and then also with the routed experts' combine before
//!   that (moe_combine's loop per element, in the same block): five nodes, one launch.
//! - at one token, the delta gates, the q and k L2 norms and the delta rule's step: one
//!   `delta_rule_step` launch with its prologue (delta.cu), each block computing its own head's
//!   gates and normed q and k with the unfused kernels' expressions (at norm_rows' block size for
//!   those norms, the step's 128 threads). The gates' outputs are stored; the norms' (in place)
//!   are not, where no later node reads them ([`read_later`]): the conv output they normalise
//!   is overwritten by the next layer's conv before anything reads it. Two launches fewer per
//!   linear-attention layer, one of them a single block. The same for a prompt's chunked rule
//!   (key dims of 128, `TALLY_DELTA_PREP=prologue`): `delta_rule_chunk_prep` computes its chunk's
//!   gates and normalises the q and k rows it loads, each warp a row as norm_rows' 128 threads
//!   would, so q and k are not written and read again.
//! - a norm and the MulSilu that gates its output (the linear-attention output norm and its z
//!   gate), and two L2 norms of one kind (q and k before the delta rule): one `norm_rows`
//!   launch, its blocks each running the unfused code on its own (row, group).

use tally_model::{Node, Op, OutLayout, Plan};

use super::delta;
use super::elementwise::shared_gate_threads;
use super::matmul::{
    CastKey, WgTile, gemv_grid, gemv_is_int, gemv_min_threads, gemv_rows_per_warp, gemv2_kernel,
    layout_code, mmv_kernel, norm_cast_target, runs_gemv, runs_mmv, use_gemvi,
    wg_tile_smem_if_fits,
};
use super::moe::{self, runs_direct_gemv};
use super::norm::{launch_norm_rows, norm_threads};
use super::router::{router_gemv, runs_router_gemv};
use super::{Io, io};
use crate::EngineError;
use crate::backend::Target;
use crate::cuda::CudaBackend;
use crate::cuda::args::{AddNormArgs, GemmArgs, MultiGemvArgs, NormArgs};
use crate::cuda::consts::{
    GEMM_THREADS, GEMV_MULTI_SEGS, GEMV_QK_MAX, GEMV_THREADS, GEMVR_MAX_M, MMV_THREADS,
};
use crate::cuda::launch::launch;

/// Runs nodes `index..` of `plan` as one fused launch if they match a pattern: the number of
/// nodes covered, or 0 (nothing launched; dispatch node `index` alone).
pub fn dispatch(b: &mut CudaBackend, plan: &Plan, index: usize) -> Result<usize, EngineError> {
    if !b.options.fuse {
        return Ok(0);
    }
    let n = expert_pairs(b, plan, index)?;
    if n > 0 {
        return Ok(n);
    }
    if router_topk(b, plan, index)? {
        return Ok(2);
    }
    if let Some(pair) = down_pair_nodes(plan, index) {
        if expert_downs(b, plan, index, pair)? {
            return Ok(2);
        }
    }
    if let Some((g, u, act)) = gate_up_nodes(plan, index) {
        if paired(b, plan, index, (g, u, Some(act)))? || expert_gated(b, plan, index, (g, u, act))?
        {
            return Ok(3);
        }
    }
    let group = multi_nodes(plan, index);
    if group >= 2 {
        let n = multi(b, plan, index, group)?;
        if n >= 2 {
            return Ok(n);
        }
    }
    if let Some((g, u)) = pair_nodes(plan, index) {
        if paired(b, plan, index, (g, u, None))? {
            return Ok(2);
        }
    }
    if let Some((combine, gate, nodes)) = combined_add_norm_nodes(plan, index) {
        let n = add_norm(b, plan, index + 2, nodes, Some(gate), Some(combine))?;
        if n > 0 {
            return Ok(n + 2);
        }
    }
    if let Some((gate, nodes)) = gated_add_norm_nodes(plan, index) {
        let n = add_norm(b, plan, index + 1, nodes, Some(gate), None)?;
        if n > 0 {
            return Ok(n + 1);
        }
    }
    if let Some(nodes) = add_norm_nodes(plan, index) {
        return add_norm(b, plan, index, nodes, None, None);
    }
    // A token-by-token rule (a step, a verification batch) takes the prologue in
    // delta_rule_step; a prompt's chunked rule only under TALLY_DELTA_PREP=prologue (the default).
    let prologue_on = |n: &DeltaNodes<'_>| {
        b.options.fuse_delta
            && (n.3.inputs[1].rows <= delta::STEP_MAX_T || b.options.delta_prep_prologue)
    };
    if let Some(nodes) = delta_prologue_nodes(plan, index).filter(prologue_on) {
        let n = delta_prologue(b, plan, index, nodes)?;
        if n > 0 {
            return Ok(n);
        }
    }
    if let Some((norm, gate)) = norm_gate_nodes(plan, index) {
        return norm_fused(b, plan, index, norm, NormWith::Gate(gate));
    }
    if let Some((first, second)) = norm_pair_nodes(plan, index) {
        return norm_fused(b, plan, index, first, NormWith::Second(second));
    }
    Ok(0)
}

/// The router of a token or a few (a verification batch) at `index` (an f32 projection that
/// `runs_router_gemv` sends to `router_fused`'s GEMV) and the TopK of its logits right after it:
/// one `router_fused` launch, the block of each token's row that finishes last running
/// router_topk8's body on the logits that row's blocks stored.
/// The logits, ids and weights are the two nodes' own launches' bits (the router node alone
/// runs the same GEMV; the top-k is router_topk8's on those logits: lab/router/emu_test.cpp).
/// False (nothing launched) for anything else, or more than 256 experts or k > 16.
fn router_topk(b: &mut CudaBackend, plan: &Plan, index: usize) -> Result<bool, EngineError> {
    let (Some(mm), Some(tk)) = (plan.nodes.get(index), plan.nodes.get(index + 1)) else {
        return Ok(false);
    };
    let (
        Op::MatMul {
            layout: OutLayout::Plain,
        },
        Op::TopK { k },
    ) = (&mm.op, &tk.op)
    else {
        return Ok(false);
    };
    let (Some(x), Some(logits)) = (mm.inputs.first(), mm.outputs.first()) else {
        return Ok(false);
    };
    if tk.inputs.first() != Some(logits) || tk.outputs.len() < 2 || *k == 0 || *k > 16 {
        return Ok(false);
    }
    let dw = b.weights.of(plan, index, 0)?;
    // A short buffer is left to the node, which reports it.
    if dw.dims.len() < 2 || dw.buf.bytes < dw.row_bytes * dw.dims[1] as usize {
        return Ok(false);
    }
    let (ty, shape) = (
        dw.ty,
        (
            dw.buf.ptr,
            dw.row_bytes,
            dw.dims[1] as usize,
            dw.dims[0] as usize,
        ),
    );
    let xp = b.view(plan, x)?;
    let m = x.rows;
    if shape.2 > 256
        || logits.cols != shape.2
        || logits.rows != m
        || !runs_router_gemv(b, ty, shape, xp, m, true)
    {
        return Ok(false);
    }
    let y = b.view(plan, logits)?;
    let ids = b.view(plan, &tk.outputs[0])?;
    let wts = b.view(plan, &tk.outputs[1])?;
    // One row stride for both top-k outputs (their k columns a row).
    if ids.1 != wts.1 || i32::try_from(ids.1).is_err() {
        return Ok(false);
    }
    router_gemv(b, shape, m, xp, y, Some((ids.0, wts.0, ids.1, *k)))?;
    Ok(true)
}

/// A norm (RMS or L2) at `index` whose output the next node, a MulSilu, gates in place: the
/// norm and the MulSilu.
fn norm_gate_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node)> {
    let (n, g) = (plan.nodes.get(index)?, plan.nodes.get(index + 1)?);
    let is_norm = matches!(n.op, Op::RmsNorm { .. } | Op::L2Norm { .. })
        && n.inputs.len() == 1
        && n.outputs.len() == 1;
    let gates = g.op == Op::MulSilu
        && g.inputs.len() == 2
        && g.outputs.len() == 1
        && g.inputs[0] == n.outputs[0]
        && g.outputs[0] == n.outputs[0];
    (is_norm && gates).then_some((n, g))
}

/// Two L2 norms at `index` with the same eps and group, the second reading nothing the first
/// writes (q and k of a linear-attention layer).
fn norm_pair_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node)> {
    let (a, b) = (plan.nodes.get(index)?, plan.nodes.get(index + 1)?);
    let (
        Op::L2Norm {
            eps: e1, group: g1, ..
        },
        Op::L2Norm {
            eps: e2, group: g2, ..
        },
    ) = (&a.op, &b.op)
    else {
        return None;
    };
    let one = |n: &Node| n.inputs.len() == 1 && n.outputs.len() == 1;
    // Run at once, neither may write what the other reads or writes.
    let apart = !overlaps(&b.inputs[0], &a.outputs[0])
        && !overlaps(&b.outputs[0], &a.inputs[0])
        && !overlaps(&b.outputs[0], &a.outputs[0]);
    (e1 == e2 && g1 == g2 && one(a) && one(b) && apart).then_some((a, b))
}

/// The delta gates at `index`, the q and k L2 norms (in place) and a delta rule that reads all
/// three outputs, one token or a chunked run (`delta::takes_prologue` but for the key dim, which
/// `delta_prologue` checks): (gates, q norm, k norm, delta rule).
type DeltaNodes<'p> = (&'p Node, &'p Node, &'p Node, &'p Node);
fn delta_prologue_nodes(plan: &Plan, index: usize) -> Option<DeltaNodes<'_>> {
    let n = |i: usize| plan.nodes.get(index + i);
    let (g, qn, kn, d) = (n(0)?, n(1)?, n(2)?, n(3)?);
    let in_place = |x: &Node| {
        matches!(x.op, Op::L2Norm { .. })
            && x.inputs.len() == 1
            && x.outputs.len() == 1
            && x.inputs[0] == x.outputs[0]
    };
    let ok = g.op == Op::DeltaGates
        && g.inputs.len() == 2
        && g.outputs.len() == 2
        && in_place(qn)
        && in_place(kn)
        && matches!(d.op, Op::DeltaRule { .. })
        && d.inputs.len() == 6
        && d.inputs[0] == qn.outputs[0]
        && d.inputs[1] == kn.outputs[0]
        && d.inputs[3] == g.outputs[1]
        && d.inputs[4] == g.outputs[0]
        && delta::takes_prologue(d.inputs[1].rows, d.inputs[0].rows, 128);
    ok.then_some((g, qn, kn, d))
}

/// Whether a node from `from` on reads an element of `v` that no node between has overwritten,
/// before a node overwrites all of `v`; or (nothing overwrites it) whether `v` outlives the run
/// (anything but an activation). A read counts only where its part of `v` is not inside one
/// output written after `from` and before it: the shared expert's gate output is written over
/// the first row of the routed experts' (one scratch buffer at decode) and read there, which does
/// not read the routed value. Within a node the inputs are read before the outputs are written.
fn read_later(plan: &Plan, from: usize, v: &tally_model::View) -> bool {
    let mut written: Vec<tally_model::View> = Vec::new();
    for node in plan.nodes.iter().skip(from) {
        for i in &node.inputs {
            if let Some(part) = intersection(i, v) {
                if !written.iter().any(|w| contains(w, &part)) {
                    return true;
                }
            }
        }
        if node.outputs.iter().any(|o| contains(o, v)) {
            return false;
        }
        written.extend(node.outputs.iter().filter(|o| o.buf == v.buf).copied());
    }
    plan.buf(v.buf).kind != tally_model::BufKind::Activation
}

/// Whether view `o` holds every element of view `v`.
fn contains(o: &tally_model::View, v: &tally_model::View) -> bool {
    o.buf == v.buf
        && o.row0 <= v.row0
        && o.row0 + o.rows >= v.row0 + v.rows
        && o.col0 <= v.col0
        && o.col0 + o.cols >= v.col0 + v.cols
}

/// The elements two views share, as a view, if any.
fn intersection(a: &tally_model::View, b: &tally_model::View) -> Option<tally_model::View> {
    if !overlaps(a, b) {
        return None;
    }
    let (r0, c0) = (a.row0.max(b.row0), a.col0.max(b.col0));
    let (r1, c1) = (
        (a.row0 + a.rows).min(b.row0 + b.rows),
        (a.col0 + a.cols).min(b.col0 + b.cols),
    );
    Some(tally_model::View {
        buf: a.buf,
        row0: r0,
        rows: r1 - r0,
        col0: c0,
        cols: c1 - c0,
    })
}

/// The gates, the q and k norms and a delta rule as one `delta_rule_step` launch with its
/// prologue, or (a prompt) the chunked rule with the prologue in `delta_rule_chunk_prep`
/// (delta.cu): the nodes covered (0: nothing launched, when the norms would not run at 128
/// threads a group, a norm's output is read later, or a shape or weight is off; each node then
/// runs on its own). The gates' outputs are stored; the in-place norms' are not (none is read
/// later: checked), so the rule's q and k views keep the norms' inputs.
fn delta_prologue(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (g, qn, kn, d): DeltaNodes<'_>,
) -> Result<usize, EngineError> {
    let Op::DeltaRule {
        k_heads,
        v_heads,
        k_dim,
        v_dim,
    } = d.op
    else {
        return Ok(0);
    };
    let (
        Op::L2Norm {
            eps: qeps,
            group: qg,
            scale: qscale,
        },
        Op::L2Norm {
            eps: keps,
            group: kg,
            scale: kscale,
        },
    ) = (&qn.op, &kn.op)
    else {
        return Ok(0);
    };
    let sms = b.props.sm_count;
    let width = k_heads * k_dim;
    let (t, r) = (d.inputs[1].rows, d.inputs[0].rows);
    // norm_rows' block size for these norms must be 128 threads a group: the step's block, and
    // the reduction the prep's warps replay (same sums in the same order).
    let norm_ok = |x: &tally_model::View, group: usize| {
        group == k_dim
            && x.cols == width
            && norm_threads((x.rows * (x.cols / group)) as u32, group, sms) == 128
    };
    let (qv, kv) = (qn.outputs[0], kn.outputs[0]);
    let (gb_v, ga_v) = (g.inputs[0], g.inputs[1]);
    let gates_ok = [gb_v, ga_v, g.outputs[0], g.outputs[1]]
        .iter()
        .all(|v| v.rows == t && v.cols == v_heads);
    if !delta::takes_prologue(t, r, k_dim) || qv.rows != r || kv.rows != t {
        return Ok(0);
    }
    // The gates' outputs are stored while other blocks read the norms' and the step's inputs.
    let reads = [qv, kv, d.inputs[2], gb_v, ga_v];
    let apart = g
        .outputs
        .iter()
        .all(|o| reads.iter().all(|r| !overlaps(o, r)));
    if !(norm_ok(&qv, *qg) && norm_ok(&kv, *kg) && gates_ok && apart)
        || read_later(plan, index + 4, &qv)
        || read_later(plan, index + 4, &kv)
    {
        return Ok(0);
    }
    let (dt_bias, ssm_a) = (b.weights.of(plan, index, 0)?, b.weights.of(plan, index, 1)?);
    if dt_bias.elems() < v_heads || ssm_a.elems() < v_heads {
        return Ok(0); // the unfused gates report it
    }
    let (dt_bias, ssm_a) = (dt_bias.buf.ptr, ssm_a.buf.ptr);
    let gi = io(b, plan, g, Target::Real)?;
    let di = io(b, plan, d, Target::Real)?;
    let pro = delta::Prologue {
        kx: di.ins[1],
        qx: di.ins[0],
        k_norm: (*keps, *kscale),
        q_norm: (*qeps, *qscale),
        gb: gi.ins[0],
        ga: gi.ins[1],
        dt_bias,
        ssm_a,
        beta_out: gi.outs[0].0,
        g_out: gi.outs[1].0,
    };
    let heads = delta::Heads {
        k_heads,
        v_heads,
        k_dim,
        v_dim,
    };
    delta::delta_rule_with(b, d, &di, heads, Some(pro))?;
    Ok(4)
}

/// Whether two views share an element.
fn overlaps(a: &tally_model::View, b: &tally_model::View) -> bool {
    let apart = |a0: usize, an: usize, b0: usize, bn: usize| a0 + an <= b0 || b0 + bn <= a0;
    a.buf == b.buf
        && !apart(a.row0, a.rows, b.row0, b.rows)
        && !apart(a.col0, a.cols, b.col0, b.cols)
}

/// What a fused norm launch does besides the norm at `index`.
enum NormWith<'p> {
    /// The MulSilu after it.
    Gate(&'p Node),
    /// A second L2 norm.
    Second(&'p Node),
}

/// One `norm_rows` launch of the norm at `index` and its gate or its second norm: the nodes
/// covered (0: nothing launched, when the two would not run with the same block size, or a
/// weight is short).
fn norm_fused(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    norm: &Node,
    with: NormWith<'_>,
) -> Result<usize, EngineError> {
    let (eps, group, scale, l2) = match norm.op {
        Op::RmsNorm { eps, group } => (eps, group, 1.0, 0),
        Op::L2Norm { eps, group, scale } => (eps, group, scale, 1),
        _ => return Ok(0),
    };
    let w = if l2 == 0 {
        let w = b.weights.of(plan, index, 0)?;
        if w.elems() < group {
            return Ok(0); // the unfused norm reports it
        }
        w.buf.ptr
    } else {
        0
    };
    let x = norm.inputs[0];
    if group == 0 || x.cols % group != 0 {
        return Ok(0);
    }
    let sms = b.props.sm_count;
    let blocks1 = (x.rows * (x.cols / group)) as u32;
    let threads = norm_threads(blocks1, group, sms);
    let ni = io(b, plan, norm, Target::Real)?;
    let mut a = NormArgs::plain(
        ni.ins[0],
        ni.outs[0],
        (x.rows, x.cols, group),
        (w, l2, scale),
        eps,
    );
    let mut blocks = blocks1;
    let mut cast = None;
    match with {
        NormWith::Gate(g) => {
            let z = b.view(plan, &g.inputs[1])?;
            if g.inputs[1].rows != x.rows || g.inputs[1].cols != x.cols {
                return Ok(0);
            }
            (a.gate, a.ldgate) = z;
            // TALLY_NORM_CAST: the gated output (the MulSilu's, in place over the norm's) also
            // as f16 in cast_buf, for the projection after it.
            if g.outputs[0] == norm.outputs[0] {
                if let Some(ptr) = norm_cast_target(b, plan, index + 1, &g.outputs[0]) {
                    (a.yh, a.ldyh) = (ptr, x.cols as i64);
                    cast = Some(CastKey {
                        view: g.outputs[0],
                        node: index + 1,
                    });
                }
            }
        }
        NormWith::Second(n2) => {
            let Op::L2Norm { scale: scale2, .. } = n2.op else {
                return Ok(0);
            };
            let x2 = n2.inputs[0];
            if x2.cols % group != 0 {
                return Ok(0);
            }
            let blocks2 = (x2.rows * (x2.cols / group)) as u32;
            if norm_threads(blocks2, group, sms) != threads {
                return Ok(0);
            }
            let i2 = io(b, plan, n2, Target::Real)?;
            (a.x2, a.ldx2) = i2.ins[0];
            (a.y2, a.ldy2) = i2.outs[0];
            a.rows2 = x2.rows as i32;
            a.cols2 = x2.cols as i32;
            a.scale2 = scale2;
            a.blocks1 = blocks1 as i32;
            blocks += blocks2;
        }
    }
    if cast.is_some() {
        b.cast.forget(); // cast_buf is rewritten
    }
    // SAFETY: blocks 0..blocks1 are the first norm's (row, group) pairs of its input view, the
    // rest the second norm's (x2 set); the block size is the one each unfused launch takes
    // (checked above). x, y (and x2, y2, gate: a view of the first's shape) are the nodes'
    // views of buffers `prepare` sized; w is null (L2) or a weight of at least `group` values
    // (checked above). With yh, cast_buf holds rows x cols halves (norm_cast_target checked
    // its size against the projection's cast of this view).
    unsafe { launch_norm_rows(b, &a, blocks, threads) }?;
    if cast.is_some() {
        b.cast.last = cast;
    }
    Ok(2)
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

/// A paired `gemv_<t>` launch's arguments: the weights' type and K, its kernels, its GemmArgs,
/// output columns N and tiles (grid.y) and its smallest block size.
struct PairedLaunch {
    ty: tally_gguf::GgmlType,
    k: usize,
    set: crate::cuda::kernels::GemmSet,
    a: GemmArgs,
    n: usize,
    tiles: usize,
    min_threads: u32,
}

/// The paired `gemv_<t>` launch of nodes `index` and `index + 1` (and their SwiGlu `act`), if
/// their weights and shapes allow it; false (nothing launched) otherwise.
fn paired(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    nodes: (&Node, &Node, Option<&Node>),
) -> Result<bool, EngineError> {
    let Some(p) = paired_launch(b, plan, index, nodes)? else {
        return Ok(false);
    };
    let (gx, threads) = gemv_grid(p.n, 1, p.tiles, b.props.sm_count, p.min_threads);
    let grid = (gx, p.tiles as u32, 1);
    let f = gemv2_kernel(b, &p.set, p.ty, p.k);
    // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). gemv_<t> in
    // paired mode: grid.x covers the N output columns at threads / 32 per block (at most
    // GEMV_THREADS, the launch bound), grid.y the M rows (dense) or the T*k one-row tiles, pair t
    // of expert ids[t] (the contiguous T x k view checked in paired_launch, experts <
    // n_expert). Both weights hold N rows (x E experts) of row_bytes (checked there), x is the
    // shared input view, y and y2 the two projections' output views and y3 the SwiGlu node's
    // (or null), in buffers `prepare` sized. gemvi_<t> has the same launch bound.
    unsafe { launch(f, grid, (threads, 1, 1), 0, b.cu_stream(), &p.a) }?;
    Ok(true)
}

/// The routed experts' gate/up/SwiGlu at `index` and the shared expert's right after them
/// (the same input), as the plan builder orders them: both paired launches as two segments of
/// one `gemv_multi_<t>` launch, grid.y the routed tiles (the shared segment's blocks past row 0
/// exit at once), when their weights share type and K. Each output is the bits its own paired
/// launch writes (gemv_multi runs gemv_<t>'s body per segment; a column's sum does not depend on
/// the block size). The two run side by side instead of one after the other.
fn expert_pairs(b: &mut CudaBackend, plan: &Plan, index: usize) -> Result<usize, EngineError> {
    let Some(((g, u, act), (sg, su, sact))) = expert_pair_nodes(plan, index) else {
        return Ok(0);
    };
    let Some(r) = paired_launch(b, plan, index, (g, u, Some(act)))? else {
        return Ok(0);
    };
    let Some(sh) = paired_launch(b, plan, index + 3, (sg, su, Some(sact)))? else {
        return Ok(0);
    };
    if r.ty != sh.ty || r.k != sh.k || sh.tiles > r.tiles {
        return Ok(0);
    }
    let segs = [(r.n, 2, r.a), (sh.n, 2, sh.a)];
    let (a, grid, threads) = multi_args(
        &segs,
        r.tiles,
        b.props.sm_count,
        r.min_threads.max(sh.min_threads),
    );
    let f = if use_gemvi(b, r.ty, r.k) {
        r.set.gemvi_multi
    } else {
        r.set.gemv_multi
    };
    // SAFETY: MultiGemvArgs mirrors gemm.cu's struct (layout asserted at kernel build). Segment
    // 0 is the routed paired launch's GemmArgs (one-row tiles from the router's ids, grid.y
    // its T*k tiles), segment 1 the shared expert's (dense, M rows <= the tiles; blocks with
    // grid.y >= M exit before touching memory); both checked by paired_launch as for their own
    // launches; a paired segment's blocks each cover threads / 32 columns (multi_args).
    unsafe { launch(f, grid, (threads, 1, 1), 0, b.cu_stream(), &a) }?;
    Ok(6)
}

/// The routed experts' gate, up and SwiGlu at `index` of a prompt (tiles of more than one row)
/// as one gated wgmma launch, `gemm_<t>_g32` or `_g128` (gemm_wg.cuh; `_g128`'s
/// warp-specialised form `_gs128` for Q4_K and MXFP4 unless `TALLY_WS=off`): the routing tables and
/// the x conversion made once instead of once per projection, each block taking 64 columns of
/// both weights against its x rows and writing silu(gate) * up only: no gate and up outputs
/// (checked: no later node reads them), no binary map. Where the unfused launches would run
/// `gemm_<t>_w32` / `_w128` (`moe::gated_bt`), with weights of one type, shape and size; each
/// output is then the bits the three nodes write (the same tile height, K order and MMAs;
/// lab/gemm/emu `gated`). False (nothing launched) otherwise, and unless `TALLY_GATED=on`.
fn expert_gated(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (g, u, act): (&Node, &Node, &Node),
) -> Result<bool, EngineError> {
    let Op::MoeMatMul {
        k,
        pair_input: false,
    } = g.op
    else {
        return Ok(false);
    };
    if !b.options.gated || g.inputs.len() != 2 || u.inputs != g.inputs {
        return Ok(false);
    }
    let (wg, wu) = (
        b.weights.of(plan, index, 0)?,
        b.weights.of(plan, index + 1, 0)?,
    );
    if wg.ty != wu.ty || wg.dims != wu.dims || wg.row_bytes != wu.row_bytes || wg.dims.len() != 3 {
        return Ok(false);
    }
    let rows = (wg.dims[1] * wg.dims[2]) as usize;
    if wg.buf.bytes < wg.row_bytes * rows || wu.buf.bytes < wu.row_bytes * rows {
        return Ok(false); // the unfused launches report it
    }
    let tiles = super::matmul::MoeTiles::gated(&b.options);
    let Some(tile) = moe::gated_bt(wg, g.inputs[1].rows, k, tiles) else {
        return Ok(false);
    };
    // The gate and up outputs are not written: none may be read after the SwiGlu, but where
    // one is the SwiGlu's own output (in place: the plan's routed SwiGlu writes over the gate's).
    if [g, u]
        .iter()
        .any(|p| p.outputs[0] != act.outputs[0] && read_later(plan, index + 3, &p.outputs[0]))
    {
        return Ok(false);
    }
    let set = b.kernels.gemm_set(wg.ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} expert weights", wg.ty.name()))
    })?;
    // The warp-specialised form of the w128 tile (unless TALLY_WS=off) for the types it was
    // measured faster on: the same outputs bit for bit (lab/gemm `--gated`, the emulator's
    // `ws`). H100, 35B gate/up at 8,192 tokens (docs/results/2026-12-05-h100-stop36): Q4_K
    // 1.046 ms against 1.228 for g128, MXFP4 1.103 against 1.194; IQ4_XS 1.195 against 1.167
    // (stays on g128); the other types' stages do not fit or were not measured.
    let ws = (tile == WgTile::W128
        && b.options.ws
        && matches!(
            wg.ty,
            tally_gguf::GgmlType::Q4_K | tally_gguf::GgmlType::MXFP4
        ))
    .then(|| super::matmul::ws_smem_if_fits(wg.ty))
    .flatten();
    // TALLY_WS256=a2: gs256 with two A stages, where they fit.
    let a2 = (tile == WgTile::W256 && b.options.ws256_a2)
        .then(|| super::matmul::ws256a_smem_if_fits(wg.ty))
        .flatten();
    let (kernel, threads, smem) = match (a2, ws) {
        (Some(bytes), _) => (set.gs256a, crate::cuda::consts::WS_THREADS, bytes),
        _ if tile == WgTile::W256 => (
            set.gs256,
            crate::cuda::consts::WS_THREADS,
            tile.smem_bytes(wg.ty),
        ),
        (None, Some(bytes)) => (set.gs128, crate::cuda::consts::WS_THREADS, bytes),
        (None, None) => {
            let Some(smem) = wg_tile_smem_if_fits(wg.ty, tile) else {
                return Ok(false);
            };
            (
                set.wg_gated[usize::from(tile == WgTile::W128)],
                GEMM_THREADS,
                smem,
            )
        }
    };
    let up = wu.buf.ptr;
    let (y3, ldy3) = io(b, plan, act, Target::Real)?.outs[0];
    let gi = io(b, plan, g, Target::Real)?;
    // Routes (the gate's tables: the up's would be the same) and makes the x conversion's args.
    let eg = moe::expert_gemm(b, plan, index, &gi, k, false, tiles)?;
    let (Some(xp), Some(t)) = (eg.xperm, eg.wg) else {
        return Err(EngineError::Internal(
            "the gated tile's GEMM has no wgmma tile".into(),
        ));
    };
    if t != tile {
        return Err(EngineError::Internal(
            "the gated tile's height changed".into(),
        ));
    }
    moe::launch_xperm(b, &xp)?;
    let mut a = eg.a;
    a.y = 0;
    a.ldy = 0;
    a.w2 = up;
    a.y3 = y3;
    a.ldy3 = ldy3;
    let grid = (eg.n.div_ceil(GATED_COLS) as u32, eg.max_tiles as u32, 1);
    // SAFETY: GemmArgs mirrors gemm.cu's struct (layout asserted at kernel build). The gate
    // node's own expert GEMM arguments (expert_gemm: routing tables of `tile`'s height, x as f16
    // in the workspace at xh, launched above) with w2 the up weight (same type, dims and row
    // bytes, its E x N rows present: checked above; the same expert stride) and y3 the SwiGlu
    // node's T*k x N output view; y null (the gated body never writes it). grid.x covers the N
    // columns at GATED_COLS a block, grid.y the tables' max_tiles; 256 threads (512 for the
    // warp-specialised gs128, whose body returns at any other count); the dynamic shared memory
    // of the unfused tile of that height or gs128's WS_SMEM_BYTES, which `configure` raised the
    // limits to.
    unsafe { launch(kernel, grid, (threads, 1, 1), smem, b.cu_stream(), &a) }?;
    Ok(true)
}

/// Output columns a gated tile's block covers (gemm_wg.cuh: half the tile's SWP_BN weight rows
/// are the gate's, half the up's).
const GATED_COLS: usize = crate::cuda::consts::SWP_BN as usize / 2;

/// The routed experts' down projection at `index` and the shared expert's right after it, as
/// the plan builder orders them.
fn down_pair_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node)> {
    let (r, sh) = (plan.nodes.get(index)?, plan.nodes.get(index + 1)?);
    let routed = matches!(
        r.op,
        Op::MoeMatMul {
            pair_input: true,
            ..
        }
    ) && r.inputs.len() == 2;
    let shared = matches!(
        sh.op,
        Op::MatMul {
            layout: OutLayout::Plain
        }
    ) && sh.inputs.len() == 1;
    (routed && shared && r.outputs.len() == 1 && !overlaps(&r.outputs[0], &sh.inputs[0]))
        .then_some((r, sh))
}

/// Both down projections of [`down_pair_nodes`] as the two segments of one `mmv_multi_<t>`
/// launch, when each runs on `mmv_<t>` alone (one-row tiles; the shared one dense at M <= the
/// tiles) with weights of one type: side by side, each output the bits its own launch writes.
fn expert_downs(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (r, sh): (&Node, &Node),
) -> Result<bool, EngineError> {
    let Op::MoeMatMul { k, pair_input } = r.op else {
        return Ok(false);
    };
    let w = b.weights.of(plan, index + 1, 0)?;
    let (ty, rows) = (w.ty, sh.inputs[0].rows);
    let Some(gx_d) = runs_mmv(b, w, rows)? else {
        return Ok(false); // the unfused launch takes it
    };
    let (kd, nd) = (w.dims[0] as usize, w.dims[1] as usize);
    if w.buf.bytes < w.row_bytes * nd {
        return Ok(false); // the unfused launch reports it
    }
    let (wptr, row_bytes) = (w.buf.ptr, w.row_bytes as i64);
    if !moe::runs_direct_mmv(b.weights.of(plan, index, 0)?, r.inputs[1].rows, k) {
        return Ok(false); // routing tables first (prefill): the unfused launch
    }
    let ri = io(b, plan, r, Target::Real)?;
    let eg = moe::expert_gemm(
        b,
        plan,
        index,
        &ri,
        k,
        pair_input,
        super::matmul::MoeTiles::of(&b.options),
    )?;
    let Some(gx_r) = eg.mmv_grid_x(b.props.sm_count) else {
        return Ok(false);
    };
    if eg.ty != ty || rows > eg.max_tiles {
        return Ok(false);
    }
    let (x, y) = (b.view(plan, &sh.inputs[0])?, b.view(plan, &sh.outputs[0])?);
    let dense = GemmArgs::dense((wptr, row_bytes), x, y, (rows, nd, kd), (0, 0, 0));
    let mut a = MultiGemvArgs {
        seg: [eg.a; GEMV_MULTI_SEGS],
        block_end: [gx_r as i32 + gx_d as i32; GEMV_MULTI_SEGS],
        rw: [2; GEMV_MULTI_SEGS],
        n_seg: 2,
        mr: 0,
    };
    a.seg[1] = dense;
    a.block_end[0] = gx_r as i32;
    let grid = (gx_r + gx_d, eg.max_tiles as u32, 1);
    let f = mmv_kernel(b, &eg.set, eg.ty, eg.kk, true);
    // SAFETY: MultiGemvArgs mirrors gemm.cu's struct (layout asserted at kernel build). Segment
    // 0 is the routed node's own mmv_<t> arguments (expert_gemm: one-row tiles from the ids,
    // grid.y its max_tiles) over its first gx_r blocks, segment 1 the shared node's dense
    // mmv_<t> arguments (its weight of N rows of row_bytes, checked above; x and y its views)
    // over the next gx_d, each block count what its own launch takes; the dense segment's
    // blocks past its M <= max_tiles rows exit; K / 32 <= MMV_THREADS (use_mmv).
    unsafe { launch(f, grid, (MMV_THREADS, 1, 1), 0, b.cu_stream(), &a) }?;
    Ok(true)
}

/// Type of a gate, up, SwiGlu triple.
type GateUp<'p> = (&'p Node, &'p Node, &'p Node);

/// The routed experts' gate/up/SwiGlu at `index` and the shared expert's at `index + 3`, of one
/// input.
fn expert_pair_nodes(plan: &Plan, index: usize) -> Option<(GateUp<'_>, GateUp<'_>)> {
    let r = gate_up_nodes(plan, index)?;
    let sh = gate_up_nodes(plan, index + 3)?;
    let routed = matches!(r.0.op, Op::MoeMatMul { .. });
    let shared = matches!(sh.0.op, Op::MatMul { .. });
    (routed && shared && r.0.inputs[0] == sh.0.inputs[0]).then_some((r, sh))
}

/// The arguments of the paired launch of [`paired`], or None when the nodes' weights and
/// shapes do not allow one.
fn paired_launch(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (g, u, act): (&Node, &Node, Option<&Node>),
) -> Result<Option<PairedLaunch>, EngineError> {
    let (wg, wu) = (
        b.weights.of(plan, index, 0)?,
        b.weights.of(plan, index + 1, 0)?,
    );
    if wg.ty != wu.ty || wg.dims != wu.dims || wg.row_bytes != wu.row_bytes {
        return Ok(None);
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
        return Ok(None);
    }
    let (ty, k, n) = (wg.ty, wg.dims[0] as usize, wg.dims[1] as usize);
    let full = |w: &crate::cuda::DevWeight| {
        let experts = w.dims.get(2).copied().unwrap_or(1) as usize;
        w.buf.bytes >= w.row_bytes * n * experts
    };
    if !full(wg) || !full(wu) {
        return Ok(None); // let the unfused launches report it
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
                return Ok(None);
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
        xh: 0,
        ldxh: 0,
    };
    // Paired mode: one output column (2 weight rows) per warp.
    Ok(Some(PairedLaunch {
        ty,
        k,
        set,
        a,
        n,
        tiles,
        min_threads: gemv_min_threads(ty, k, 2),
    }))
}

/// How many consecutive dense projections from `index` (at most [`GEMV_MULTI_SEGS`]) read the
/// same input view: the candidates of one `gemv_multi_<t>` launch.
fn multi_nodes(plan: &Plan, index: usize) -> usize {
    let Some(first) = plan.nodes.get(index) else {
        return 0;
    };
    let dense =
        |n: &Node| matches!(n.op, Op::MatMul { .. }) && n.inputs.len() == 1 && n.outputs.len() == 1;
    if !dense(first) {
        return 0;
    }
    plan.nodes[index..]
        .iter()
        .take(GEMV_MULTI_SEGS)
        .take_while(|n| dense(n) && n.inputs[0] == first.inputs[0])
        .count()
}

/// One `gemv_multi_<t>` launch of the first nodes of the `group` from `index` that each run on
/// `gemv_<t>` with weights of the first one's type and K: the number of nodes it ran (0:
/// nothing launched, when fewer than two qualify).
fn multi(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    group: usize,
) -> Result<usize, EngineError> {
    let first = &plan.nodes[index];
    let rows = first.inputs[0].rows;
    let w0 = b.weights.of(plan, index, 0)?;
    let (ty, k) = (w0.ty, w0.dims[0]);
    let mut segs = Vec::with_capacity(group);
    for j in index..index + group {
        let w = b.weights.of(plan, j, 0)?;
        if w.ty != ty || w.dims.len() != 2 || w.dims[0] != k || !runs_gemv(b, w, rows)? {
            break;
        }
        let n = w.dims[1] as usize;
        if w.buf.bytes < w.row_bytes * n {
            break; // the unfused launch reports it
        }
        let Op::MatMul { layout } = plan.nodes[j].op else {
            break;
        };
        segs.push((j, w.buf.ptr, w.row_bytes as i64, n, layout_code(layout)));
    }
    if segs.len() < 2 {
        return Ok(0);
    }
    let set = *b.kernels.gemm_set(ty).ok_or_else(|| {
        EngineError::Unsupported(format!(
            "no GEMM for {} weights ({})",
            ty.name(),
            first.name
        ))
    })?;
    let x = b.view(plan, &first.inputs[0])?;
    let mr = multi_rows(b.options.gemv_mr, ty, k as usize, rows);
    // One x row a block on the integer body: gemvi_multi_<t>, every segment at 2 rows a warp.
    let gemvi = mr == 0 && use_gemvi(b, ty, k as usize);
    let mut args = Vec::with_capacity(segs.len());
    for &(j, w, row_bytes, n, (layout, head_dim, n_head)) in &segs {
        let y = b.view(plan, &plan.nodes[j].outputs[0])?;
        let rw = if mr > 1 || gemvi {
            2
        } else {
            gemv_rows_per_warp(b, n)
        };
        args.push((
            n,
            rw,
            GemmArgs::dense(
                (w, row_bytes),
                x,
                y,
                (rows, n, k as usize),
                (layout, head_dim, n_head),
            ),
        ));
    }
    let min_threads = args
        .iter()
        .map(|&(_, rw, _)| gemv_min_threads(ty, k as usize, rw))
        .max()
        .unwrap_or(64);
    // A block per x row (grid.y = rows), or every row in each block (mr > 1, grid.y 1).
    let grid_rows = if mr > 1 { 1 } else { rows };
    let (mut a, grid, threads) = multi_args(&args, grid_rows, b.props.sm_count, min_threads);
    a.mr = mr as i32;
    // Every row in each block on that body alone (gemvi_mr_<t>: more blocks a multiprocessor,
    // the same sums as gemv_multi_<t>'s mr form) unless TALLY_GEMVI=off.
    let f = if gemvi {
        set.gemvi_multi
    } else if mr > 1 && b.options.gemvi {
        set.gemvi_mr
    } else {
        set.gemv_multi
    };
    // SAFETY: MultiGemvArgs mirrors gemm.cu's struct (layout asserted at kernel build). Segment
    // s is the argument set `gemv_<t>` would get for node index + s (dense, plain or q/gate
    // layout, 2 columns per warp): its weight holds N rows of row_bytes (checked above), x is the
    // shared input view, y the node's output view, in buffers `prepare` sized. Its blocks are
    // block_end[s-1]..block_end[s] of grid.x, each covering rw[s] * threads / 32 columns; grid.y
    // is the M rows, or 1 with mr = M rows in each block (multi_rows: an integer format, K <=
    // GEMV_QK_MAX / GEMVR_MAX_M, 2 <= M <= GEMVR_MAX_M, rw 2); threads <= GEMV_THREADS, the
    // launch bound (gemvi_multi_<t>'s too: it is launched only with mr 0 and every segment at
    // rw 2, as it requires; gemvi_mr_<t>'s only with mr > 1 and every segment at rw 2).
    unsafe { launch(f, grid, (threads, 1, 1), 0, b.cu_stream(), &a) }?;
    Ok(segs.len())
}

/// The x rows each block of a `gemv_multi_<t>` launch takes (`MultiGemvArgs::mr`): all `rows`
/// of a verification batch (2 to GEMVR_MAX_M) unless `TALLY_GEMV_MR=off`, with an integer
/// format and K <= GEMV_QK_MAX / GEMVR_MAX_M (every row's quantised x in the block's shared memory); else
/// 0, a block per row.
fn multi_rows(on: bool, ty: tally_gguf::GgmlType, k: usize, rows: usize) -> usize {
    let fits = gemv_is_int(ty, k) && k as i64 <= GEMV_QK_MAX / GEMVR_MAX_M as i64;
    if on && fits && (2..=GEMVR_MAX_M).contains(&rows) {
        rows
    } else {
        0
    }
}

/// One segment of a `gemv_multi_<t>` launch: output columns, rows per warp (2 or 4) and its
/// `gemv_<t>` arguments.
type Segment = (usize, usize, GemmArgs);

/// The arguments, grid and block size of one `gemv_multi_<t>` launch of `segs` over `rows`
/// input rows: blocks of GEMV_THREADS, down to 2 warps while the launch would leave
/// multiprocessors without two blocks, never below `min_threads` (as [`gemv_grid`]).
fn multi_args(
    segs: &[Segment],
    rows: usize,
    sms: u32,
    min_threads: u32,
) -> (MultiGemvArgs, (u32, u32, u32), u32) {
    let blocks = |threads: u32| -> Vec<u32> {
        let warps = (threads / 32) as usize;
        // A paired segment (w2 set, 2 rows per warp: gate and up) has one column per warp.
        segs.iter()
            .map(|&(n, rw, g)| {
                let cols = if g.w2 != 0 && rw == 2 { 1 } else { rw };
                n.div_ceil(cols * warps) as u32
            })
            .collect()
    };
    let mut threads = GEMV_THREADS;
    while threads > min_threads.max(64)
        && blocks(threads).iter().sum::<u32>() as usize * rows.max(1) < 2 * sms as usize
    {
        threads /= 2;
    }
    let mut a = MultiGemvArgs {
        seg: [segs[0].2; GEMV_MULTI_SEGS],
        block_end: [0; GEMV_MULTI_SEGS],
        rw: [2; GEMV_MULTI_SEGS],
        n_seg: segs.len() as i32,
        mr: 0,
    };
    let mut end = 0;
    for (s, (nb, &(_, rw, g))) in blocks(threads).into_iter().zip(segs).enumerate() {
        end += nb;
        a.seg[s] = g;
        a.rw[s] = rw as i32;
        a.block_end[s] = end as i32;
    }
    for s in segs.len()..GEMV_MULTI_SEGS {
        a.block_end[s] = end as i32;
    }
    (a, (end, rows as u32, 1), threads)
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

/// The shared-expert gate at `index` (in place on its second input), then the two adds and
/// the norm of [`add_norm_nodes`], the first add reading the gated output.
fn gated_add_norm_nodes(plan: &Plan, index: usize) -> Option<(&Node, AddNorm<'_>)> {
    let g = plan.nodes.get(index)?;
    let in_place = g.op == Op::SharedGate
        && g.inputs.len() == 2
        && g.outputs.len() == 1
        && g.inputs[1] == g.outputs[0];
    if !in_place {
        return None;
    }
    let nodes = add_norm_nodes(plan, index + 1)?;
    let reads = nodes.0.is_some_and(|f| f.inputs.contains(&g.outputs[0]));
    reads.then_some((g, nodes))
}

/// The routed experts' combine at `index`, then the shared gate, the two adds and the norm of
/// [`gated_add_norm_nodes`], the first add reading the combine's output as its ungated operand.
fn combined_add_norm_nodes(plan: &Plan, index: usize) -> Option<(&Node, &Node, AddNorm<'_>)> {
    let c = plan.nodes.get(index)?;
    let is_combine =
        matches!(c.op, Op::MoeCombine { .. }) && c.inputs.len() == 2 && c.outputs.len() == 1;
    if !is_combine {
        return None;
    }
    let (gate, nodes) = gated_add_norm_nodes(plan, index + 1)?;
    let first = nodes.0?;
    let ungated = usize::from(first.inputs[0] == gate.outputs[0]);
    (first.inputs[ungated] == c.outputs[0] && !overlaps(&c.outputs[0], &c.inputs[0]))
        .then_some((c, gate, nodes))
}

fn add_norm(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    (first, add, norm): AddNorm<'_>,
    gate: Option<&Node>,
    combine: Option<&Node>,
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
    let threads = norm_threads(out.rows as u32, group, b.props.sm_count);
    let (ai, ni) = (
        io(b, plan, add, Target::Real)?,
        io(b, plan, norm, Target::Real)?,
    );
    // One add: sum = a + b. Two: mid = a + b (the first add), sum = mid + c, c being the second
    // add's other input. With the gate, b is the gate's output (the adds commute bit for bit).
    let (x, y, c, mut mid) = match first {
        None => (ai.ins[0], ai.ins[1], (0, 0), (0, 0)),
        Some(f) => {
            let fi = io(b, plan, f, Target::Real)?;
            let other = usize::from(add.inputs[0] == f.outputs[0]);
            let gated_first = gate.is_some_and(|g| f.inputs[0] == g.outputs[0]);
            let (x, y) = if gated_first {
                (fi.ins[1], fi.ins[0])
            } else {
                (fi.ins[0], fi.ins[1])
            };
            (x, y, ai.ins[other], fi.outs[0])
        }
    };
    let (mut gx, mut gw, mut gb) = ((0, 0), 0, (0, 0));
    if let Some(g) = gate {
        // The shared_gate kernel's block size must be the norm's, or the gate's sum would be
        // another rounding.
        let gate_threads = shared_gate_threads(g.inputs[0].rows);
        let gwt = b.weights.of(plan, index - 1, 0)?;
        if gate_threads != threads
            || gwt.elems() < out.cols
            || g.inputs[0].rows != out.rows
            || g.inputs[0].cols != out.cols
        {
            return Ok(0);
        }
        gw = gwt.buf.ptr;
        let gi = io(b, plan, g, Target::Real)?;
        gx = gi.ins[0];
        gb = gi.outs[0];
    }
    let (mut ey, mut ew, mut ek) = ((0, 0), (0, 0), 0);
    if let Some(cn) = combine {
        let Op::MoeCombine { k } = cn.op else {
            return Ok(0);
        };
        // The combine's output is the first add's ungated operand (the pattern), x above; its
        // expert rows are T * k x cols and its weights T x k.
        let (ye, we) = (cn.inputs[0], cn.inputs[1]);
        if cn.outputs[0].rows != out.rows
            || cn.outputs[0].cols != out.cols
            || ye.rows != out.rows * k
            || ye.cols != out.cols
            || we.rows != out.rows
            || we.cols < k
        {
            return Ok(0);
        }
        let ci = io(b, plan, cn, Target::Real)?;
        if ci.outs[0] != x {
            return Ok(0);
        }
        (ey, ew, ek) = (ci.ins[0], ci.ins[1], k as i32);
    }
    // With `TALLY_ADD_NORM=skip`, the intermediate outputs no later node reads are not stored:
    // the first add's (mid), the gate's (gb) and the combine's (a; the register form only). The
    // sum and the norm's output always are.
    let after = index + covered;
    let skip = b.options.add_norm_skip;
    let unread =
        |v: Option<&tally_model::View>| skip && v.is_some_and(|v| !read_later(plan, after, v));
    if unread(first.map(|f| &f.outputs[0])) {
        mid = (0, 0);
    }
    if unread(gate.map(|g| &g.outputs[0])) {
        gb = (0, 0);
    }
    let skip_a = unread(combine.map(|c| &c.outputs[0]));
    let mut a = AddNormArgs {
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
        skip_a: i32::from(skip_a),
        gx: gx.0,
        ldgx: gx.1,
        gw,
        gb: gb.0,
        ldgb: gb.1,
        ey: ey.0,
        ldey: ey.1,
        ew: ew.0,
        ldew: ew.1,
        ek,
        no_regs: i32::from(!b.options.add_norm_regs),
        yh: 0,
        ldyh: 0,
    };
    // TALLY_NORM_CAST: the norm's output also as f16 in cast_buf, for the projections after it.
    let norm_index = index + covered - 1;
    // Only add_rms_norm_256 has the copy's form (a prompt's rows; decode takes no cuBLAS).
    let cast = norm_cast_target(b, plan, norm_index, &norm.outputs[0]).filter(|_| threads <= 256);
    if let Some(ptr) = cast {
        (a.yh, a.ldyh) = (ptr, out.cols as i64);
        b.cast.forget(); // cast_buf is rewritten
    }
    // add_rms_norm_256 is the same kernel under a 256-thread launch bound (room for its
    // register form at 8 values a thread).
    let kernel = if cast.is_some() {
        b.kernels.add_rms_norm_256_h
    } else if threads <= 256 {
        b.kernels.add_rms_norm_256
    } else {
        b.kernels.add_rms_norm
    };
    // SAFETY: AddNormArgs mirrors norm.cu's struct (layout asserted at kernel build). One block
    // per row of the add's output view, at most 1,024 threads (256 for add_rms_norm_256, whose
    // launch bound it is); a, b (and c, mid) are the adds' input and output views, sum and y
    // the last add's and the norm's outputs (rows x cols each), in buffers `prepare` sized; w
    // is the norm weight of at least cols values (checked above); with the gate, gx and gb are
    // its input and (in place) output views of the same rows x cols, gw its weight of at least
    // cols values (checked above). With yh, cast_buf holds rows x cols halves (norm_cast_target
    // checked its size against the projection's cast of this view).
    unsafe {
        launch(
            kernel,
            (out.rows as u32, 1, 1),
            (threads, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }?;
    if cast.is_some() {
        b.cast.last = Some(CastKey {
            view: norm.outputs[0],
            node: norm_index,
        });
    }
    Ok(covered)
}

#[cfg(test)]
mod tests {
    use tally_model::synth::Preset;
    use tally_model::{PlanOptions, build_plan};

    use super::*;

    /// The multi-row launch (on unless `TALLY_GEMV_MR=off`) puts a 2-4 row verification
    /// batch's fused GEMVs in one block per column group (integer formats, K <= 2048), every
    /// segment at 2 rows a warp: qkv, z, beta, alpha of 4 tokens in 512 + 256 + 2 + 2 blocks and
    /// one grid row, where a block per row launches (516, 4).
    #[test]
    fn multi_row_launches_take_every_row_in_a_block() {
        use tally_gguf::GgmlType::{BF16, Q4_K, Q6_K};
        assert_eq!(multi_rows(true, Q4_K, 2048, 4), 4);
        assert_eq!(multi_rows(true, Q6_K, 2048, 2), 2);
        for (on, ty, k, rows) in [
            (false, Q4_K, 2048, 4), // TALLY_GEMV_MR=off
            (true, Q4_K, 2048, 1),  // one-token steps: a block per row, as before
            (true, Q4_K, 2048, 5),  // more rows than a block holds
            (true, Q4_K, 4096, 4),  // four quantised rows of 4096 do not fit
            (true, BF16, 2048, 4),  // the f32 body has no shared x
        ] {
            assert_eq!(multi_rows(on, ty, k, rows), 0, "{ty:?} k {k} rows {rows}");
        }
        let seg = |n: usize, rw: usize| {
            (
                n,
                rw,
                GemmArgs::dense((0, 0), (0, 0), (0, 0), (4, n, 2048), (0, 0, 0)),
            )
        };
        let segs = [seg(8192, 2), seg(4096, 2), seg(32, 2), seg(32, 2)];
        let (a, grid, threads) = multi_args(&segs, 1, 132, 64);
        assert_eq!((grid, threads), ((772, 1, 1), 256));
        assert_eq!((a.block_end, a.rw), ([512, 768, 770, 772], [2; 4]));
    }

    /// The grids `gemv_multi_<t>` launched with on the H200 (132 SMs), as ncu recorded them in
    /// docs/results/2026-12-02-h200-decode-host/ab2/step-d0-none.txt: qkv (rw 4), z, beta,
    /// alpha: (516, 256 threads); z, beta, alpha alone (a layer whose qkv is another type): 520
    /// at 128 threads; q (rw 4) and k of a full-attention layer: 288.
    #[test]
    fn multi_grids_are_the_measured_ones() {
        let seg = |n: usize, rw: usize| {
            (
                n,
                rw,
                GemmArgs::dense((0, 0), (0, 0), (0, 0), (1, n, 2048), (0, 0, 0)),
            )
        };
        let (a, grid, threads) = multi_args(
            &[seg(8192, 4), seg(4096, 2), seg(32, 2), seg(32, 2)],
            1,
            132,
            64,
        );
        assert_eq!((grid, threads), ((516, 1, 1), 256));
        assert_eq!(
            (a.block_end, a.rw, a.n_seg),
            ([256, 512, 514, 516], [4, 2, 2, 2], 4)
        );
        let (a, grid, threads) = multi_args(&[seg(4096, 2), seg(32, 2), seg(32, 2)], 1, 132, 64);
        assert_eq!((grid, threads), ((520, 1, 1), 128));
        assert_eq!(a.block_end, [512, 516, 520, 520]);
        let (_, grid, _) = multi_args(&[seg(8192, 4), seg(512, 2)], 1, 132, 64);
        assert_eq!(grid, (288, 1, 1));
        // With the integer body's floor (16 weight rows a block: 256 threads at 2 rows a warp).
        let (a, grid, threads) = multi_args(&[seg(4096, 2), seg(32, 2), seg(32, 2)], 1, 132, 256);
        assert_eq!((grid, threads), ((260, 1, 1), 256));
        assert_eq!(a.block_end, [256, 258, 260, 260]);
    }

    #[test]
    fn views_overlap_only_when_they_share_an_element() {
        let v = |row0, rows, col0, cols| tally_model::View {
            buf: tally_model::BufId(3),
            row0,
            rows,
            col0,
            cols,
        };
        let (q, k) = (v(0, 1, 0, 2048), v(0, 1, 2048, 2048));
        assert!(!overlaps(&q, &k) && !overlaps(&k, &q));
        assert!(overlaps(&q, &v(0, 1, 2047, 2)));
        assert!(!overlaps(&v(0, 2, 0, 8), &v(2, 1, 0, 8)));
        let other = tally_model::View {
            buf: tally_model::BufId(4),
            ..q
        };
        assert!(!overlaps(&q, &other));
        assert_eq!(
            intersection(&v(0, 4, 0, 8), &v(1, 1, 4, 8)),
            Some(v(1, 1, 4, 4))
        );
        assert_eq!(intersection(&q, &k), None);
        assert!(
            contains(&v(0, 4, 0, 8), &v(1, 1, 4, 4)) && !contains(&v(1, 1, 4, 4), &v(0, 4, 0, 8))
        );
    }

    /// The patterns find what the model has: per layer one routed and one shared gate/up/SwiGlu
    /// triple; the residual add after attention with the post-attention norm, and the FFN's two
    /// adds (routed + shared, then the residual) with the next layer's input norm (the output
    /// norm after the last layer); and the pairs of projections of one input (beta/alpha, k/v
    /// where the weights allow); per linear-attention layer the gated output norm and the q/k
    /// L2 norm pair: in a decode step and in a prefill, nothing overlapping.
    #[test]
    fn patterns_match_each_ffn_and_residual_norm() {
        for preset in [Preset::Tiny, Preset::TinyOdd, Preset::Mid] {
            let cfg = preset.config();
            for n in [1, 5, 40] {
                let plan = build_plan(&cfg, n, 64, &PlanOptions::default()).expect("plan");
                let (mut triples, mut add2, mut add3, mut pairs, mut i) = (0, 0, 0, 0, 0);
                let (mut gated, mut norm_pairs, mut gated_adds, mut combined) = (0, 0, 0, 0);
                let (mut expert_pairs, mut down_pairs, mut deltas) = (0, 0, 0);
                while i < plan.nodes.len() {
                    if let Some((r, sh)) = down_pair_nodes(&plan, i) {
                        assert!(r.name.ends_with("down_exps"), "{}", r.name);
                        assert!(sh.name.ends_with("down_shexp"), "{}", sh.name);
                        down_pairs += 1;
                    }
                    if let Some((r, sh)) = expert_pair_nodes(&plan, i) {
                        assert!(r.0.name.ends_with("gate_exps"), "{}", r.0.name);
                        assert!(sh.0.name.ends_with("gate_shexp"), "{}", sh.0.name);
                        expert_pairs += 1;
                    }
                    if let Some((g, u, act)) = gate_up_nodes(&plan, i) {
                        assert!(g.name.ends_with("gate_exps") || g.name.ends_with("gate_shexp"));
                        assert!(u.name.ends_with("up_exps") || u.name.ends_with("up_shexp"));
                        // The gated tile (expert_gated) writes the SwiGlu only: after it
                        // nothing may read the gate and up outputs but where one is the
                        // SwiGlu's own (in place over the gate's); the SwiGlu is read (the down).
                        for p in [g, u] {
                            let o = &p.outputs[0];
                            assert!(o == &act.outputs[0] || !read_later(&plan, i + 3, o));
                        }
                        assert!(read_later(&plan, i + 3, &act.outputs[0]), "{}", act.name);
                        triples += 1;
                        i += 3;
                    } else if let Some((c, g, (first, a, m))) = combined_add_norm_nodes(&plan, i) {
                        assert!(c.name.ends_with("moe_combine"), "{}", c.name);
                        assert!(g.name.ends_with("shexp_gate"), "{}", g.name);
                        assert!(first.is_some_and(|f| f.name.ends_with("ffn_out")));
                        assert!(a.name.ends_with("residual") && m.name.ends_with("norm"));
                        // add_norm leaves unstored what no later node reads: the combine's, the
                        // gate's and the first add's outputs (TALLY_ADD_NORM=skip); the sum (the
                        // residual stream) and the norm's output are read.
                        let unread = |v| !read_later(&plan, i + 5, v);
                        assert!(unread(&c.outputs[0]) && unread(&g.outputs[0]), "{}", c.name);
                        assert!(first.is_some_and(|f| unread(&f.outputs[0])), "{}", a.name);
                        assert!(!unread(&m.outputs[0]), "{}", m.name);
                        combined += 1;
                        gated_adds += 1;
                        add3 += 1;
                        i += 5;
                    } else if let Some((g, (first, a, m))) = gated_add_norm_nodes(&plan, i) {
                        assert!(g.name.ends_with("shexp_gate"), "{}", g.name);
                        assert!(first.is_some_and(|f| f.name.ends_with("ffn_out")));
                        assert!(a.name.ends_with("residual") && m.name.ends_with("norm"));
                        gated_adds += 1;
                        add3 += 1;
                        i += 4;
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
                    } else if let Some((g, q, k, d)) = delta_prologue_nodes(&plan, i) {
                        assert!(g.name.ends_with("ssm_gates"), "{}", g.name);
                        assert!(q.name.ends_with("ssm_q_l2norm"), "{}", q.name);
                        assert!(k.name.ends_with("ssm_k_l2norm"), "{}", k.name);
                        assert!(d.name.ends_with("delta_rule"), "{}", d.name);
                        // The normed q and k die with the step (the next conv overwrites
                        // them); its output is read next (the gated norm), its state kept.
                        assert!(!read_later(&plan, i + 4, &q.outputs[0]), "{}", q.name);
                        assert!(!read_later(&plan, i + 4, &k.outputs[0]), "{}", k.name);
                        assert!(read_later(&plan, i + 4, &d.outputs[0]), "{}", d.name);
                        assert!(read_later(&plan, i + 4, &d.outputs[1]), "{}", d.name);
                        deltas += 1;
                        i += 4;
                    } else if let Some((n, g)) = norm_gate_nodes(&plan, i) {
                        assert!(n.name.ends_with("ssm_norm"), "{}", n.name);
                        assert!(g.name.ends_with("ssm_gate_silu"), "{}", g.name);
                        gated += 1;
                        i += 2;
                    } else if let Some((q, k)) = norm_pair_nodes(&plan, i) {
                        assert!(q.name.ends_with("ssm_q_l2norm"), "{}", q.name);
                        assert!(k.name.ends_with("ssm_k_l2norm"), "{}", k.name);
                        norm_pairs += 1;
                        i += 2;
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
                // One input for qkv, z, beta, alpha (linear attention) and q, k, v (full).
                if n == 1 {
                    for (j, node) in plan.nodes.iter().enumerate() {
                        let name = node.name.rsplit('.').next();
                        let want = match name {
                            Some("attn_qkv") => 4,
                            Some("attn_q") => 3,
                            _ => continue,
                        };
                        assert_eq!(multi_nodes(&plan, j), want, "{preset:?} {}", node.name);
                    }
                }
                let layers = cfg.n_layers;
                let linear = cfg.n_linear_layers();
                // Any token count: the gates, q/k norms and the rule as one launch (the step
                // kernel's prologue up to STEP_MAX_T tokens, a verification batch included;
                // the chunked prep's beyond), so no norm pair is left.
                assert_eq!(
                    (gated, norm_pairs, deltas),
                    (linear, 0, linear),
                    "{preset:?} n={n}"
                );
                assert_eq!(
                    (gated_adds, combined),
                    (layers, layers),
                    "{preset:?} n={n}: one combine and shared gate per layer"
                );
                assert_eq!(triples, 2 * layers, "{preset:?} n={n}");
                assert_eq!(
                    expert_pairs, layers,
                    "{preset:?} n={n}: routed + shared gate/up"
                );
                assert_eq!(down_pairs, layers, "{preset:?} n={n}: routed + shared down");
                assert_eq!((add2, add3), (layers, layers), "{preset:?} n={n}");
                assert_eq!(
                    pairs, layers,
                    "{preset:?} n={n}: beta/alpha or k/v per layer"
                );
            }
        }
    }
}
