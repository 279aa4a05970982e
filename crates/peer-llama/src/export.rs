//! Graph export: the captured nodes of llama.cpp's scheduled graph turned into the ledger's
//! [`GraphNode`]s, with categories, layers, producer links, row dependencies, bytes and FLOPs.

use std::collections::HashMap;

use tally_ledger::schema::{GraphNode, NodeInput, TensorDesc};

use crate::catmap::{layer_of, row_dep, weight_layer};
use crate::ffi::{self, NodeSnap, SrcSnap};
use crate::probe::{Captured, classify_snap};

/// Logical shape, outermost first, without ggml's padding dimensions of 1 (at least one dim).
pub(crate) fn shape(ne: &[i64; 4]) -> Vec<u64> {
    let mut n = 4;
    while n > 1 && ne[n - 1] == 1 {
        n -= 1;
    }
    ne[..n].iter().rev().map(|&d| d.max(0) as u64).collect()
}

fn desc(s: &SrcSnap) -> TensorDesc {
    TensorDesc {
        name: s.name.clone(),
        shape: shape(&s.ne),
        dtype: ffi::type_name(s.type_),
    }
}

fn nelements(ne: &[i64; 4]) -> u64 {
    ne.iter().map(|&d| d.max(0) as u64).product()
}

/// Where the token rows of a tensor are: the outermost dimension equal to one of the candidate
/// row counts (those of its producers).
fn rows_of(ne: &[i64; 4], candidates: &[u64]) -> Option<u64> {
    (0..4)
        .rev()
        .map(|d| ne[d].max(0) as u64)
        .find(|v| candidates.contains(v))
}

/// Bytes and FLOPs of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Cost {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub weight_bytes: u64,
    pub weight_params: u64,
    pub flops: u64,
}

/// Expected fraction of experts a MUL_MAT_ID touches when `pairs_per_token` of `n_expert`
/// are drawn per token for `tokens` tokens, uniformly (a trained router spreads load about so).
pub(crate) fn touched_fraction(n_expert: u64, per_token: u64, tokens: u64) -> f64 {
    if n_expert == 0 {
        return 1.0;
    }
    let miss = 1.0 - (per_token as f64 / n_expert as f64).min(1.0);
    1.0 - miss.powf(tokens as f64)
}

/// The cost model (documented in docs/peer-llama.md).
pub(crate) fn cost(snap: &NodeSnap, n_past: u64) -> Cost {
    if snap.is_noop {
        return Cost::default();
    }
    let op = snap.op_name.as_str();
    let me = &snap.src_;
    let out_elems = nelements(&me.ne);
    let mut c = Cost {
        bytes_written: me.nbytes,
        ..Cost::default()
    };
    for (k, s) in snap.srcs.iter().enumerate() {
        // Destinations of copies are written, not read.
        if (op == "CPY" && k == 1) || (op == "SET_ROWS" && k == 0) {
            continue;
        }
        let (bytes, params) = match (op, k, s.is_weight) {
            ("MUL_MAT_ID", 0, true) => {
                let ids = snap.srcs.get(2).map_or([1, 1, 1, 1], |i| i.ne);
                let f = touched_fraction(
                    s.ne[2].max(1) as u64,
                    ids[0].max(0) as u64,
                    ids[1].max(0) as u64,
                );
                (
                    (s.nbytes as f64 * f) as u64,
                    (nelements(&s.ne) as f64 * f) as u64,
                )
            }
            ("GET_ROWS", 0, true) => {
                let rows = snap.srcs.get(1).map_or(0, |i| nelements(&i.ne));
                (
                    rows * ffi::row_bytes(s.type_, s.ne[0]),
                    rows * s.ne[0].max(0) as u64,
                )
            }
            _ => (s.nbytes, nelements(&s.ne)),
        };
        c.bytes_read += bytes;
        if s.is_weight {
            c.weight_bytes += bytes;
            c.weight_params += params;
        }
    }
    if op == "SET_ROWS" {
        let rows = snap
            .srcs
            .get(1)
            .map_or(0, |s| nelements(&s.ne) / s.ne[0].max(1) as u64);
        c.bytes_written = rows * ffi::row_bytes(me.type_, me.ne[0]);
    }
    let src0 = snap.srcs.first().map_or([0; 4], |s| s.ne);
    c.flops = match op {
        "MUL_MAT" | "MUL_MAT_ID" => 2 * src0[0].max(0) as u64 * out_elems,
        "FLASH_ATTN_EXT" => {
            // q [D, n_q, H, S], k [D, n_kv, H_kv, S], v [Dv, n_kv, H_kv, S]; causal pairs only:
            // query i (0-based, after n_past cached tokens) sees n_past + i + 1 keys.
            let q = src0;
            let dv = snap.srcs.get(2).map_or(0, |v| v.ne[0].max(0) as u64);
            let n_q = q[1].max(0) as u64;
            let pairs = n_q * n_past + n_q * (n_q + 1) / 2;
            2 * pairs * (q[0].max(0) as u64 + dv) * q[2].max(0) as u64 * q[3].max(1) as u64
        }
        "GATED_DELTA_NET" => {
            // v [S_v, H_v, T, S]: per token and value head the state (S_v x S_v) is decayed (1),
            // read against k (2), updated by a rank-1 term (2) and read against q (2).
            let v = snap.srcs.get(2).map_or([0; 4], |v| v.ne);
            let s_v = v[0].max(0) as u64;
            7 * s_v * s_v * (v[1].max(0) * v[2].max(0) * v[3].max(1)) as u64
        }
        "SSM_CONV" => {
            let k = snap.srcs.get(1).map_or(0, |w| w.ne[0].max(0) as u64);
            2 * k * out_elems
        }
        "RMS_NORM" | "L2_NORM" | "NORM" => 3 * out_elems,
        "SOFT_MAX" => 5 * out_elems,
        // One multiply-add pair per rotated element pair: 3 FLOPs per rotated element.
        "ROPE" => {
            3 * (snap.op_params[1].max(0) as u64).min(me.ne[0].max(0) as u64)
                * (out_elems / me.ne[0].max(1) as u64)
        }
        "GLU" => 2 * out_elems,
        "SUM_ROWS" | "CUMSUM" => nelements(&src0),
        "ADD" | "ADD1" | "SUB" | "MUL" | "DIV" | "SCALE" | "UNARY" | "CLAMP" | "SQR" | "SQRT"
        | "LOG" | "SIN" | "COS" | "TRI" | "FILL" => out_elems,
        _ => 0,
    };
    c
}

/// Turns captured nodes (in execution order, possibly several graph executions) into export
/// nodes of a batch of `n_tokens` after `n_past` context tokens. `n_ubatch` gives each
/// execution's position (execution g starts at token `n_past + g*n_ubatch`).
pub(crate) fn build_nodes(
    captured: &[Captured],
    n_tokens: u64,
    n_past: u64,
    n_ubatch: u64,
) -> Vec<GraphNode> {
    let mut nodes: Vec<GraphNode> = Vec::with_capacity(captured.len());
    // (graph, address) -> node index; (graph, name) -> last node index with that name.
    let mut by_addr: HashMap<(usize, usize), usize> = HashMap::new();
    let mut by_name: HashMap<(usize, String), usize> = HashMap::new();
    for (i, cap) in captured.iter().enumerate() {
        let snap = &cap.snap;
        let g = cap.graph;
        let category = classify_snap(snap);
        let mut inputs = Vec::with_capacity(snap.srcs.len());
        let mut src_rows: Vec<u64> = Vec::new();
        let mut src_layer = None;
        for (k, s) in snap.srcs.iter().enumerate() {
            let producer = by_addr.get(&(g, s.addr)).copied().or_else(|| {
                // A scheduler copy of a tensor for another backend is named
                // `<backend>#<tensor>#<copy>` and is not itself a node.
                let orig = ffi::orig_name(&s.name);
                (orig != s.name)
                    .then(|| by_name.get(&(g, orig.to_string())).copied())
                    .flatten()
            });
            if let Some(p) = producer {
                if let Some(r) = nodes[p].rows {
                    src_rows.push(r);
                }
                src_layer = src_layer.or(nodes[p].layer);
            }
            inputs.push(NodeInput {
                tensor: desc(s),
                src: producer.map(|p| p as u32),
                rows: row_dep(&snap.op_name, k, s.is_weight),
            });
        }
        let ne = &snap.src_.ne;
        let graph_tokens = n_tokens.saturating_sub(g as u64 * n_ubatch).min(n_ubatch);
        let selects_rows = snap.op_name == "GET_ROWS"
            && (snap.srcs.first().is_some_and(|s| s.is_weight)
                || snap
                    .srcs
                    .get(1)
                    .is_some_and(|ix| ffi::orig_name(&ix.name) == "out_ids"));
        let mixes_tokens = snap.op_name == "SSM_CONV"
            || (snap.is_noop
                && snap.srcs.first().is_some_and(|s| {
                    by_addr.get(&(g, s.addr)).is_some_and(|&p| {
                        matches!(nodes[p].op.as_str(), "SSM_CONV" | "GATED_DELTA_NET")
                    })
                }));
        let rows = if selects_rows {
            // Row selection: one output row per index (token embedding, output-row selection).
            snap.srcs.get(1).map(|ix| nelements(&ix.ne))
        } else if src_rows.is_empty() && mixes_tokens {
            // Outputs of sequence-mixing ops have one row per token of this graph execution.
            rows_of(ne, &[graph_tokens])
        } else {
            rows_of(ne, &src_rows)
        };
        let weight_layer_of = snap
            .srcs
            .iter()
            .filter(|s| s.is_weight)
            .find_map(|s| weight_layer(&s.name));
        let layer = layer_of(snap.name()).or(weight_layer_of).or(src_layer);
        let c = cost(snap, n_past + g as u64 * n_ubatch);
        let persistent = !snap.is_noop
            && snap
                .view_root
                .as_deref()
                .is_some_and(|r| r.starts_with("cache_"));
        nodes.push(GraphNode {
            index: i as u32,
            name: snap.name().to_string(),
            op: snap.op_name.clone(),
            category,
            layer,
            inputs,
            output: desc(&snap.src_),
            rows,
            is_view: snap.is_noop,
            persistent,
            is_output: snap.name() == "result_output" && !snap.is_noop,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            weight_bytes: c.weight_bytes,
            weight_params: c.weight_params,
            flops: c.flops,
        });
        by_addr.insert((g, snap.src_.addr), i);
        by_name.insert((g, snap.name().to_string()), i);
    }
    nodes
}
