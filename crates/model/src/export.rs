//! The plan as a ledger graph export: per node its tensors, where each input came from, how its
//! rows are needed (for dead-work analysis), and the byte and FLOP counts of the work it must do.
//! Also the node counts the architecture implies, derived from the config alone, so a plan that
//! drops or repeats work fails the cross-check.

use std::collections::HashMap;

use tally_gguf::GgufFile;
use tally_ledger::Category;
use tally_ledger::schema::{
    EngineInfo, ExpectedCount, GraphExport, GraphNode, NodeInput, RowDep, SCHEMA_VERSION,
    TensorDesc,
};

use crate::config::Config;
use crate::plan::{BufKind, Node, Op, Plan, View};

/// Expected number of distinct experts touched when `tokens` tokens each pick `k` of `experts`
/// uniformly: `E * (1 - (1 - k/E)^tokens)`.
pub fn expected_experts_touched(tokens: usize, experts: usize, k: usize) -> f64 {
    if experts == 0 {
        return 0.0;
    }
    let e = experts as f64;
    e * (1.0 - (1.0 - k as f64 / e).powf(tokens as f64))
}

/// Byte and FLOP counts of one node (the fewest bytes it must move: each input once, each output
/// once).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeCost {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub weight_bytes: u64,
    pub weight_params: u64,
    pub flops: u64,
}

fn view_bytes(v: &View) -> u64 {
    (v.elems() * 4) as u64
}

/// Cost of a node of a batch after `n_past` tokens (attention's visible keys and the cache
/// rows it reads depend on it); weight sizes come from the model file.
pub fn node_cost(node: &Node, cfg: &Config, file: &GgufFile, n_past: usize) -> NodeCost {
    let mut c = NodeCost {
        bytes_read: node.inputs.iter().map(view_bytes).sum(),
        bytes_written: node.outputs.iter().map(view_bytes).sum(),
        ..NodeCost::default()
    };
    // Full weight tensors (experts handled below).
    let weight = |name: &str| -> (u64, u64) {
        file.tensor(name)
            .map(|t| (t.n_bytes(), t.n_elems()))
            .unwrap_or((0, 0))
    };
    let out0 = node.outputs.first().copied();
    let in0 = node.inputs.first().copied();
    let rows = in0.map(|v| v.rows as u64).unwrap_or(0);
    let elems_out = out0.map(|v| v.elems() as u64).unwrap_or(0);
    match &node.op {
        Op::MatMul { .. } => {
            let (wb, wp) = weight(&node.weights[0]);
            c.weight_bytes = wb;
            c.weight_params = wp;
            c.flops = 2 * rows * wp;
        }
        Op::MoeMatMul { k, .. } => {
            let (wb, wp) = weight(&node.weights[0]);
            let e = cfg.n_experts as u64;
            let tokens = node.inputs[1].rows;
            let touched = expected_experts_touched(tokens, cfg.n_experts, *k);
            let per_expert_bytes = wb / e.max(1);
            let per_expert_params = wp / e.max(1);
            c.weight_bytes = (touched * per_expert_bytes as f64).round() as u64;
            c.weight_params = (touched * per_expert_params as f64).round() as u64;
            let pairs = (tokens * k) as u64;
            c.flops = 2 * pairs * per_expert_params;
            // The input is read once per pair row that uses it at most; count it once.
        }
        Op::Embed => {
            let (wb, wp) = weight(&node.weights[0]);
            let vocab = cfg.vocab.max(1) as u64;
            c.weight_bytes = wb / vocab * rows;
            c.weight_params = wp / vocab * rows;
        }
        Op::Attention {
            n_head,
            head_dim,
            q_offset,
            ..
        } => {
            let r = rows;
            let q0 = (n_past + q_offset) as u64;
            let keys: u64 = (0..r).map(|i| q0 + i + 1).sum();
            c.flops = 4 * keys * (*n_head * *head_dim) as u64 + 5 * keys * *n_head as u64;
            // The caches are whole views; the kernel reads the visible rows only.
            let visible = (q0 + r) as usize;
            c.bytes_read = node
                .inputs
                .iter()
                .enumerate()
                .map(|(i, v)| match i {
                    1 | 2 => (visible.min(v.rows) * v.cols * 4) as u64,
                    _ => view_bytes(v),
                })
                .sum();
        }
        Op::KvStore => {
            // Rows pos..pos+T of the (whole) cache views: what the inputs hold.
            c.bytes_written = node.inputs.iter().take(2).map(view_bytes).sum();
        }
        Op::DeltaRule {
            v_heads,
            k_dim,
            v_dim,
            ..
        } => {
            let t = node.inputs[1].rows as u64;
            let r = rows;
            let hs = (*v_heads * *k_dim * *v_dim) as u64;
            // decay, S^T k, rank-1 update per token; readout for the R output rows.
            c.flops = (5 * t + 2 * r) * hs;
        }
        Op::ConvSilu => {
            let (_, wp) = weight(&node.weights[0]);
            c.weight_bytes = wp * 4;
            c.weight_params = wp;
            c.flops = 2 * elems_out * cfg.conv_kernel as u64 + 4 * elems_out;
        }
        Op::RmsNorm { .. } | Op::L2Norm { .. } => {
            for w in &node.weights {
                let (wb, wp) = weight(w);
                c.weight_bytes += wb;
                c.weight_params += wp;
            }
            c.flops = 4 * elems_out;
        }
        Op::Rope { dims, head_dim, .. } => {
            let rotated = elems_out / (*head_dim as u64).max(1) * *dims as u64;
            c.flops = 3 * rotated;
            // Columns past `dims` are untouched in place; a copy into the cache moves them too.
        }
        Op::TopK { .. } => {
            let e = in0.map(|v| v.elems() as u64).unwrap_or(0);
            c.flops = 5 * e;
        }
        Op::SharedGate | Op::DeltaGates => {
            for w in &node.weights {
                let (wb, wp) = weight(w);
                c.weight_bytes += wb;
                c.weight_params += wp;
            }
            c.flops = 2 * in0.map(|v| v.elems() as u64).unwrap_or(0) + 4 * elems_out;
        }
        Op::Add | Op::MulSilu | Op::MulSigmoid | Op::SwiGlu | Op::MoeCombine { .. } => {
            c.flops = 4 * elems_out;
        }
    }
    c.bytes_read += c.weight_bytes;
    c
}

/// How the rows of each input of `op` are needed by its output rows.
fn row_deps(op: &Op, n_inputs: usize) -> Vec<RowDep> {
    let mut deps = vec![RowDep::Same; n_inputs];
    match op {
        Op::ConvSilu | Op::KvStore => deps.iter_mut().for_each(|d| *d = RowDep::All),
        Op::Rope { .. } => deps.iter_mut().skip(1).for_each(|d| *d = RowDep::All),
        Op::DeltaRule { .. } | Op::Attention { .. } => {
            deps.iter_mut().skip(1).for_each(|d| *d = RowDep::All)
        }
        _ => {}
    }
    deps
}

/// Expected node counts from the config alone (not from the plan), with their derivations.
pub fn expected_counts(cfg: &Config) -> Vec<ExpectedCount> {
    let l = cfg.n_layers as u64;
    let lin = cfg.n_linear_layers() as u64;
    let full = cfg.n_full_layers() as u64;
    let gu = if cfg.gate_up_fused { 1 } else { 2 };
    let e = |what: &str, cat: Category, op: Option<&str>, n: u64, how: String| ExpectedCount {
        what: what.into(),
        category: Some(cat),
        op: op.map(str::to_string),
        expected: n,
        derivation: how,
    };
    vec![
        e(
            "token embedding lookups",
            Category::Embedding,
            None,
            1,
            "one per batch".into(),
        ),
        e(
            "routed-expert gate/up projections",
            Category::MoeGateUp,
            Some("moe_matmul"),
            l * gu,
            format!(
                "{l} layers x {gu} ({})",
                if gu == 1 { "fused gate_up" } else { "gate, up" }
            ),
        ),
        e(
            "routed-expert down projections",
            Category::MoeDown,
            Some("moe_matmul"),
            l,
            format!("{l} layers x 1"),
        ),
        e(
            "router projections",
            Category::Router,
            Some("matmul"),
            l,
            format!("{l} layers x 1"),
        ),
        e(
            "dense projections",
            Category::DenseProj,
            Some("matmul"),
            lin * 5 + full * 4,
            format!(
                "{lin} linear layers x 5 (qkv, gate, beta, alpha, out) + {full} full layers x 4 (q, k, v, o)"
            ),
        ),
        e(
            "shared-expert projections",
            Category::SharedExpert,
            Some("matmul"),
            l * 3,
            format!("{l} layers x 3 (gate, up, down)"),
        ),
        e(
            "delta-rule recurrences",
            Category::DeltaRule,
            None,
            lin,
            format!("{lin} linear-attention layers"),
        ),
        e(
            "causal convolutions",
            Category::Conv,
            None,
            lin,
            format!("{lin} linear-attention layers"),
        ),
        e(
            "attention calls",
            Category::Attention,
            None,
            full,
            format!("{full} full-attention layers"),
        ),
        e(
            "KV cache stores",
            Category::Layout,
            Some("kv_store"),
            full,
            format!("{full} full-attention layers x 1 (k and v at the batch position)"),
        ),
        e(
            "RoPE applications",
            Category::Rope,
            None,
            full * 2,
            format!("{full} full-attention layers x 2 (q, k)"),
        ),
        e(
            "output head projections",
            Category::OutputHead,
            None,
            1,
            "last token only".into(),
        ),
    ]
}

fn tensor_desc_view(plan: &Plan, v: &View) -> TensorDesc {
    let b = plan.buf(v.buf);
    TensorDesc {
        name: b.name.clone(),
        shape: vec![v.rows as u64, v.cols as u64],
        dtype: b.dtype.name().into(),
    }
}

/// Exports the plan as run after `n_past` tokens for the ledger. `engine` says which backend
/// and build produced it.
pub fn export_graph(
    plan: &Plan,
    n_past: usize,
    cfg: &Config,
    file: &GgufFile,
    engine: EngineInfo,
) -> GraphExport {
    // The last node that wrote each region, to connect inputs to their producers.
    let mut writes: HashMap<u32, Vec<(View, u32)>> = HashMap::new();
    let mut nodes = Vec::with_capacity(plan.nodes.len());
    for (i, node) in plan.nodes.iter().enumerate() {
        let deps = row_deps(&node.op, node.inputs.len());
        let mut inputs: Vec<NodeInput> = node
            .inputs
            .iter()
            .zip(deps)
            .map(|(v, rows)| {
                let src = writes
                    .get(&v.buf.0)
                    .and_then(|ws| ws.iter().rev().find(|(w, _)| w.overlaps(v)))
                    .map(|(_, n)| *n);
                NodeInput {
                    tensor: tensor_desc_view(plan, v),
                    src,
                    rows,
                }
            })
            .collect();
        for w in &node.weights {
            if let Some(t) = file.tensor(w) {
                inputs.push(NodeInput {
                    tensor: TensorDesc {
                        name: w.clone(),
                        shape: t.dims.iter().rev().copied().collect(),
                        dtype: t.ty.name().to_ascii_lowercase(),
                    },
                    src: None,
                    rows: RowDep::All,
                });
            }
        }
        let out = node.outputs[0];
        let cost = node_cost(node, cfg, file, n_past);
        let per_token = plan.buf(out.buf).rows_per_token.max(1);
        let persistent = node
            .outputs
            .iter()
            .any(|v| plan.buf(v.buf).kind == BufKind::State);
        let is_output = node
            .outputs
            .iter()
            .any(|v| plan.buf(v.buf).kind == BufKind::Logits);
        nodes.push(GraphNode {
            index: i as u32,
            name: node.name.clone(),
            op: node.op.name().into(),
            category: node.category,
            layer: node.layer.map(|l| l as u32),
            inputs,
            output: tensor_desc_view(plan, &out),
            rows: Some((out.rows / per_token) as u64),
            is_view: false,
            persistent,
            is_output,
            bytes_read: cost.bytes_read,
            bytes_written: cost.bytes_written,
            weight_bytes: cost.weight_bytes,
            weight_params: cost.weight_params,
            flops: cost.flops,
        });
        for v in &node.outputs {
            writes.entry(v.buf.0).or_default().push((*v, i as u32));
        }
    }
    GraphExport {
        schema: SCHEMA_VERSION,
        engine,
        n_tokens: plan.n_tokens as u64,
        n_past: n_past as u64,
        nodes,
        expected: expected_counts(cfg),
        notes: vec![
            "tally plans have no view nodes: views are rectangles of buffers inside each node"
                .into(),
            format!(
                "routed-expert bytes assume uniform routing: {:.1} of {} experts touched per layer at {} tokens",
                expected_experts_touched(plan.n_tokens, cfg.n_experts, cfg.n_experts_used),
                cfg.n_experts,
                plan.n_tokens
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experts_touched_limits() {
        // One token touches exactly k experts; many tokens touch nearly all.
        assert!((expected_experts_touched(1, 256, 8) - 8.0).abs() < 1e-9);
        let many = expected_experts_touched(512, 256, 8);
        assert!(many > 255.99 && many <= 256.0, "{many}");
        // Hand-computed: 2 tokens, 4 experts, k=2: 4 * (1 - 0.25) = 3.
        assert!((expected_experts_touched(2, 4, 2) - 3.0).abs() < 1e-12);
    }
}
