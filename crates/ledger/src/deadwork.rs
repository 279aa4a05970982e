//! Dead work: nodes whose output reaches neither the logits nor persistent state, and nodes
//! that compute more token rows than anything downstream needs.
//!
//! Needed rows propagate backwards from every output node (`is_output`) and every
//! persistent-state writer (`persistent`, which must keep all its rows) through each input's
//! [`RowDep`]: `Same` asks the producer for as many rows as the consumer needs (capped at the
//! producer's rows), `All` asks for every row as soon as the consumer needs any. A node without a
//! token axis is all-or-nothing. When several consumers need rows, the largest need wins: this
//! assumes the needed rows nest (the last token's row is inside "all rows"), which holds for a
//! causal prefill.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::schema::{GraphExport, GraphNode, RowDep};

/// A node that is dead or computes more rows than are needed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WastedNode {
    /// Position in the graph.
    pub index: u32,
    /// Stable node name.
    pub name: String,
    /// Engine op.
    pub op: String,
    /// Ledger category.
    pub category: Category,
    /// Layer, when per-layer.
    pub layer: Option<u32>,
    /// Rows the node computes (None: no token axis).
    pub rows_computed: Option<u64>,
    /// Rows anything downstream needs (0: dead).
    pub rows_needed: u64,
    /// Bytes spent on unneeded rows. Dead: all bytes read and written. Partially dead: the
    /// activation bytes (read minus weights, plus written) pro rata of the wasted rows, since
    /// weights are read once however few rows are computed.
    pub wasted_bytes: u64,
    /// FLOPs spent on unneeded rows (pro rata of rows; all of them when dead).
    pub wasted_flops: u64,
}

/// Waste per category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryWaste {
    /// The category.
    pub category: Category,
    /// Dead non-view nodes.
    pub dead_nodes: u64,
    /// Partially dead nodes.
    pub partial_nodes: u64,
    /// Wasted bytes.
    pub wasted_bytes: u64,
    /// Wasted FLOPs.
    pub wasted_flops: u64,
}

/// Result of [`dead_work`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeadWorkReport {
    /// Engine of the graph.
    pub engine: String,
    /// Nodes flagged `is_output` (roots of the analysis).
    pub output_nodes: u64,
    /// Nodes flagged `persistent` (roots of the analysis).
    pub persistent_nodes: u64,
    /// Non-view nodes nothing needs, in graph order.
    pub dead: Vec<WastedNode>,
    /// Non-view nodes computing more rows than needed, in graph order.
    pub partial: Vec<WastedNode>,
    /// View nodes nothing needs (no work, listed by count only).
    pub dead_view_nodes: u64,
    /// Per category with any waste, in [`Category::ALL`] order.
    pub by_category: Vec<CategoryWaste>,
    /// Total wasted bytes.
    pub wasted_bytes: u64,
    /// Total wasted FLOPs.
    pub wasted_flops: u64,
    /// Bytes read plus written by all non-view nodes.
    pub total_bytes: u64,
    /// FLOPs of all non-view nodes.
    pub total_flops: u64,
}

impl DeadWorkReport {
    /// True when the graph does no dead or partially dead work.
    pub fn clean(&self) -> bool {
        self.dead.is_empty() && self.partial.is_empty()
    }

    /// Wasted FLOPs over all FLOPs (0 when the graph has none).
    pub fn wasted_flops_ratio(&self) -> f64 {
        ratio(self.wasted_flops, self.total_flops)
    }

    /// Wasted bytes over all bytes moved (0 when the graph moves none).
    pub fn wasted_bytes_ratio(&self) -> f64 {
        ratio(self.wasted_bytes, self.total_bytes)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// `value * num / den` in exact integer arithmetic (floor).
fn pro_rata(value: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return 0;
    }
    (u128::from(value) * u128::from(num) / u128::from(den)) as u64
}

/// Rows needed of each node's output, by backward propagation from the roots.
pub fn needed_rows(graph: &GraphExport) -> Vec<u64> {
    let nodes = &graph.nodes;
    let cap = |n: &GraphNode| n.rows.unwrap_or(1);
    let mut need: Vec<u64> = nodes
        .iter()
        .map(|n| {
            if n.is_output || n.persistent {
                cap(n)
            } else {
                0
            }
        })
        .collect();
    for i in (0..nodes.len()).rev() {
        if need[i] == 0 {
            continue;
        }
        let consumer = &nodes[i];
        for input in &consumer.inputs {
            // Only earlier producers: a malformed forward edge is reported by check_graph.
            let Some(j) = input.src.map(|s| s as usize).filter(|&j| j < i) else {
                continue;
            };
            let producer = &nodes[j];
            let want = match (input.rows, consumer.rows, producer.rows) {
                (RowDep::Same, Some(_), Some(p)) => need[i].min(p),
                _ => cap(producer),
            };
            need[j] = need[j].max(want);
        }
    }
    need
}

/// Finds dead and partially dead nodes of a graph.
pub fn dead_work(graph: &GraphExport) -> DeadWorkReport {
    let need = needed_rows(graph);
    let mut dead = Vec::new();
    let mut partial = Vec::new();
    let mut dead_view_nodes = 0;
    let mut by_cat: BTreeMap<Category, CategoryWaste> = BTreeMap::new();
    let (mut total_bytes, mut total_flops) = (0u64, 0u64);
    for (node, &needed) in graph.nodes.iter().zip(&need) {
        let moved = node.bytes_read + node.bytes_written;
        if node.is_view {
            dead_view_nodes += u64::from(needed == 0);
            continue;
        }
        total_bytes += moved;
        total_flops += node.flops;
        let rows = node.rows.unwrap_or(1);
        if needed >= rows {
            continue;
        }
        let (wasted_bytes, wasted_flops) = if needed == 0 {
            (moved, node.flops)
        } else {
            let activation = node.bytes_read.saturating_sub(node.weight_bytes) + node.bytes_written;
            (
                pro_rata(activation, rows - needed, rows),
                pro_rata(node.flops, rows - needed, rows),
            )
        };
        let w = WastedNode {
            index: node.index,
            name: node.name.clone(),
            op: node.op.clone(),
            category: node.category,
            layer: node.layer,
            rows_computed: node.rows,
            rows_needed: needed,
            wasted_bytes,
            wasted_flops,
        };
        let c = by_cat.entry(node.category).or_insert(CategoryWaste {
            category: node.category,
            dead_nodes: 0,
            partial_nodes: 0,
            wasted_bytes: 0,
            wasted_flops: 0,
        });
        c.wasted_bytes += wasted_bytes;
        c.wasted_flops += wasted_flops;
        if needed == 0 {
            c.dead_nodes += 1;
            dead.push(w);
        } else {
            c.partial_nodes += 1;
            partial.push(w);
        }
    }
    let by_category: Vec<CategoryWaste> = by_cat.into_values().collect();
    DeadWorkReport {
        engine: graph.engine.engine.clone(),
        output_nodes: graph.nodes.iter().filter(|n| n.is_output).count() as u64,
        persistent_nodes: graph.nodes.iter().filter(|n| n.persistent).count() as u64,
        wasted_bytes: by_category.iter().map(|c| c.wasted_bytes).sum(),
        wasted_flops: by_category.iter().map(|c| c.wasted_flops).sum(),
        dead,
        partial,
        dead_view_nodes,
        by_category,
        total_bytes,
        total_flops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{ToyGraph, toy_graph};

    #[test]
    fn last_layer_computing_all_rows_is_partially_dead() {
        let cfg = ToyGraph::default(); // 3 layers, 8 tokens, last layer computes all rows
        let g = toy_graph(&cfg);
        let r = dead_work(&g);
        assert!(r.dead.is_empty(), "{:?}", r.dead);
        let names: Vec<&str> = r.partial.iter().map(|w| w.name.as_str()).collect();
        // Everything after the last layer's K/V store that feeds only the last token.
        assert_eq!(
            names,
            [
                "blk.2.attn_q",
                "blk.2.attn",
                "blk.2.attn_output",
                "blk.2.attn_residual",
                "blk.2.ffn_router",
                "blk.2.moe_gate_up",
                "blk.2.moe_down",
                "output_norm",
            ]
        );
        assert!(
            r.partial
                .iter()
                .all(|w| w.rows_computed == Some(8) && w.rows_needed == 1)
        );
        // attn_q: weights 64x64 at 4.5 bits = 2304 bytes; activations read 8x64x4 = 2048,
        // written 2048; waste = 7/8 of 4096 = 3584 bytes; FLOPs 2*8*64*64 = 65536 -> 7/8 = 57344.
        let q = &r.partial[0];
        assert_eq!((q.wasted_bytes, q.wasted_flops), (3584, 57344));
        // Earlier layers and the last layer's norm/k/v are fully needed (the KV cache needs all rows).
        assert!(!names.contains(&"blk.2.attn_k") && !names.contains(&"blk.1.attn_q"));
        assert_eq!(r.output_nodes, 1);
        assert_eq!(r.persistent_nodes, 3);
        assert_eq!(
            r.wasted_flops,
            r.partial.iter().map(|w| w.wasted_flops).sum::<u64>()
        );
        assert!(r.wasted_flops_ratio() > 0.0 && r.wasted_flops_ratio() < 1.0);
    }

    #[test]
    fn last_layer_for_last_token_only_is_clean() {
        let g = toy_graph(&ToyGraph {
            last_layer_all_rows: false,
            ..ToyGraph::default()
        });
        let r = dead_work(&g);
        assert!(r.clean(), "dead {:?} partial {:?}", r.dead, r.partial);
        assert_eq!((r.wasted_bytes, r.wasted_flops), (0, 0));
    }

    #[test]
    fn unread_node_is_dead_with_all_its_cost() {
        let g = toy_graph(&ToyGraph {
            dead_node: true,
            last_layer_all_rows: false,
            ..ToyGraph::default()
        });
        let r = dead_work(&g);
        assert_eq!(r.dead.len(), 1);
        let d = &r.dead[0];
        assert_eq!(d.name, "blk.0.attn_debug_copy");
        assert_eq!(d.rows_needed, 0);
        let node = &g.nodes[d.index as usize];
        assert_eq!(d.wasted_bytes, node.bytes_read + node.bytes_written);
        assert_eq!(d.wasted_flops, node.flops);
        assert!(r.partial.is_empty());
        assert_eq!(r.by_category.len(), 1);
        assert_eq!(r.by_category[0].category, Category::Layout);
    }

    #[test]
    fn hand_built_chain_rowdeps() {
        use crate::fake::node;
        // 0: x (8 rows) -> 1: a = f(x) Same (8 rows) -> 2: s = select last row of a (1 row, Same)
        //    -> 3: out (1 row, output). 4: c = conv over x (All, 8 rows), unread: dead.
        // 5: state = reduce over x (no token axis, persistent, input All).
        let mut nodes = vec![
            node(0, "x", Category::Embedding, Some(8), &[]),
            node(1, "a", Category::Norm, Some(8), &[(0, RowDep::Same)]),
            node(2, "s", Category::Layout, Some(1), &[(1, RowDep::Same)]),
            node(
                3,
                "out",
                Category::OutputHead,
                Some(1),
                &[(2, RowDep::Same)],
            ),
            node(4, "c", Category::Conv, Some(8), &[(0, RowDep::All)]),
            node(5, "state", Category::DeltaRule, None, &[(0, RowDep::All)]),
        ];
        nodes[3].is_output = true;
        nodes[5].persistent = true;
        let mut g = toy_graph(&ToyGraph::default());
        g.nodes = nodes;
        assert_eq!(needed_rows(&g), vec![8, 1, 1, 1, 0, 1]);
        let r = dead_work(&g);
        assert_eq!(r.dead.len(), 1);
        assert_eq!(r.dead[0].name, "c");
        assert_eq!(r.partial.len(), 1);
        assert_eq!(r.partial[0].name, "a");
    }
}
