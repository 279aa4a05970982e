//! Graph checks: counts per op and per category, the architecture cross-check, index sanity.
//!
//! The counts the ledger multiplies by come from the engine's real graph, never from the
//! architecture; the architecture only checks them. A mismatch makes the report fail.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::error::LedgerError;
use crate::schema::{GraphExport, GraphNode, SCHEMA_VERSION};

/// Work and cost of one category's non-view nodes (view nodes only counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryCount {
    /// The category.
    pub category: Category,
    /// Non-view nodes (the ones that do work and are timed).
    pub nodes: u64,
    /// View-only nodes of this category (do no work).
    pub view_nodes: u64,
    /// Sum of `bytes_read` over non-view nodes.
    pub bytes_read: u64,
    /// Sum of `bytes_written` over non-view nodes.
    pub bytes_written: u64,
    /// Sum of `weight_bytes` over non-view nodes.
    pub weight_bytes: u64,
    /// Sum of `weight_params` over non-view nodes.
    pub weight_params: u64,
    /// Sum of `flops` over non-view nodes.
    pub flops: u64,
}

impl CategoryCount {
    /// A category with no nodes.
    pub fn empty(category: Category) -> CategoryCount {
        CategoryCount {
            category,
            nodes: 0,
            view_nodes: 0,
            bytes_read: 0,
            bytes_written: 0,
            weight_bytes: 0,
            weight_params: 0,
            flops: 0,
        }
    }
}

/// Nodes per engine op name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpCount {
    /// The engine's op name.
    pub op: String,
    /// Non-view nodes.
    pub nodes: u64,
    /// View nodes.
    pub view_nodes: u64,
}

/// One architecture-derived count, checked against the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExpectedCheck {
    /// What is counted.
    pub what: String,
    /// Category matcher.
    pub category: Option<Category>,
    /// Op matcher.
    pub op: Option<String>,
    /// Count the architecture implies.
    pub expected: u64,
    /// Non-view nodes matching every given matcher.
    pub found: u64,
    /// How `expected` follows from the config.
    pub derivation: String,
    /// `expected == found` and at least one matcher was given.
    pub ok: bool,
}

/// A structural defect of a graph export. Every issue fails the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GraphIssue {
    /// The export was written by an incompatible schema version.
    SchemaVersion {
        /// Version in the export.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// `node.index` differs from the node's position.
    IndexMismatch {
        /// Position in `nodes`.
        position: u32,
        /// The node's claimed index.
        index: u32,
        /// Node name.
        name: String,
    },
    /// An input's producer is not an earlier node.
    SrcNotBackwards {
        /// Consumer position.
        node: u32,
        /// Consumer name.
        name: String,
        /// Input position.
        input: u32,
        /// Producer index given.
        src: u32,
    },
    /// An expected count names neither a category nor an op, so it matches nothing defined.
    NoMatcher {
        /// The count's description.
        what: String,
    },
    /// An expected count differs from the graph.
    CountMismatch {
        /// The count's description.
        what: String,
        /// Expected by the architecture.
        expected: u64,
        /// Found in the graph.
        found: u64,
        /// The derivation given by the exporter.
        derivation: String,
    },
}

impl fmt::Display for GraphIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphIssue::SchemaVersion { found, expected } => write!(
                f,
                "export has schema version {found}, this build reads version {expected}"
            ),
            GraphIssue::IndexMismatch {
                position,
                index,
                name,
            } => write!(
                f,
                "node `{name}` at position {position} claims index {index}"
            ),
            GraphIssue::SrcNotBackwards {
                node,
                name,
                input,
                src,
            } => write!(
                f,
                "node {node} `{name}` input {input} comes from node {src}, which is not an earlier node"
            ),
            GraphIssue::NoMatcher { what } => {
                write!(
                    f,
                    "expected count `{what}` names neither a category nor an op"
                )
            }
            GraphIssue::CountMismatch {
                what,
                expected,
                found,
                derivation,
            } => write!(
                f,
                "{what}: expected {expected} ({derivation}), found {found} in the graph"
            ),
        }
    }
}

/// Result of [`check_graph`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphReport {
    /// Engine that exported the graph.
    pub engine: String,
    /// Prompt tokens of the graph.
    pub n_tokens: u64,
    /// Position of the batch (context tokens before it; 0: a prefill from a fresh state).
    #[serde(default)]
    pub n_past: u64,
    /// All nodes.
    pub nodes: u64,
    /// View-only nodes (counted, no work).
    pub view_nodes: u64,
    /// Nodes that do work: `nodes - view_nodes`. Probe completeness compares dispatches to this.
    pub work_nodes: u64,
    /// Per category, in [`Category::ALL`] order, categories with at least one node only.
    pub categories: Vec<CategoryCount>,
    /// Per op name, sorted by name.
    pub ops: Vec<OpCount>,
    /// Each architecture-derived count against the graph.
    pub expected: Vec<ExpectedCheck>,
    /// Structural defects and count mismatches; empty when the graph passes.
    pub issues: Vec<GraphIssue>,
    /// Sum of non-view `bytes_read`.
    pub bytes_read: u64,
    /// Sum of non-view `bytes_written`.
    pub bytes_written: u64,
    /// Sum of non-view `flops`.
    pub flops: u64,
}

impl GraphReport {
    /// True when no check failed.
    pub fn ok(&self) -> bool {
        self.issues.is_empty()
    }

    /// The category's counts (zeros when the graph has none).
    pub fn category(&self, category: Category) -> CategoryCount {
        self.categories
            .iter()
            .find(|c| c.category == category)
            .cloned()
            .unwrap_or_else(|| CategoryCount::empty(category))
    }

    /// Turns a failing report into [`LedgerError::GraphCheck`]; a passing one is returned.
    pub fn into_result(self) -> Result<GraphReport, LedgerError> {
        if self.ok() {
            return Ok(self);
        }
        Err(LedgerError::GraphCheck {
            engine: self.engine.clone(),
            summary: self
                .issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        })
    }
}

fn matches(node: &GraphNode, category: Option<Category>, op: Option<&str>) -> bool {
    !node.is_view && category.is_none_or(|c| node.category == c) && op.is_none_or(|o| node.op == o)
}

/// Counts a graph per category and per op, checks every `expected` count against the non-view
/// nodes and checks node indices (`index == position`, every `src` an earlier node).
pub fn check_graph(graph: &GraphExport) -> GraphReport {
    let mut issues = Vec::new();
    if graph.schema != SCHEMA_VERSION {
        issues.push(GraphIssue::SchemaVersion {
            found: graph.schema,
            expected: SCHEMA_VERSION,
        });
    }
    let mut cats: BTreeMap<Category, CategoryCount> = BTreeMap::new();
    let mut ops: BTreeMap<&str, OpCount> = BTreeMap::new();
    for (position, node) in graph.nodes.iter().enumerate() {
        let position = position as u32;
        if node.index != position {
            issues.push(GraphIssue::IndexMismatch {
                position,
                index: node.index,
                name: node.name.clone(),
            });
        }
        for (i, input) in node.inputs.iter().enumerate() {
            if let Some(src) = input.src.filter(|&s| s >= position) {
                issues.push(GraphIssue::SrcNotBackwards {
                    node: position,
                    name: node.name.clone(),
                    input: i as u32,
                    src,
                });
            }
        }
        let c = cats
            .entry(node.category)
            .or_insert_with(|| CategoryCount::empty(node.category));
        let o = ops.entry(&node.op).or_insert_with(|| OpCount {
            op: node.op.clone(),
            nodes: 0,
            view_nodes: 0,
        });
        if node.is_view {
            c.view_nodes += 1;
            o.view_nodes += 1;
        } else {
            c.nodes += 1;
            o.nodes += 1;
            c.bytes_read += node.bytes_read;
            c.bytes_written += node.bytes_written;
            c.weight_bytes += node.weight_bytes;
            c.weight_params += node.weight_params;
            c.flops += node.flops;
        }
    }
    let mut expected = Vec::new();
    for e in &graph.expected {
        let found = graph
            .nodes
            .iter()
            .filter(|n| matches(n, e.category, e.op.as_deref()))
            .count() as u64;
        let has_matcher = e.category.is_some() || e.op.is_some();
        let ok = has_matcher && found == e.expected;
        if !has_matcher {
            issues.push(GraphIssue::NoMatcher {
                what: e.what.clone(),
            });
        } else if !ok {
            issues.push(GraphIssue::CountMismatch {
                what: e.what.clone(),
                expected: e.expected,
                found,
                derivation: e.derivation.clone(),
            });
        }
        expected.push(ExpectedCheck {
            what: e.what.clone(),
            category: e.category,
            op: e.op.clone(),
            expected: e.expected,
            found,
            derivation: e.derivation.clone(),
            ok,
        });
    }
    let categories: Vec<CategoryCount> = cats.into_values().collect();
    let view_nodes = categories.iter().map(|c| c.view_nodes).sum::<u64>();
    GraphReport {
        engine: graph.engine.engine.clone(),
        n_tokens: graph.n_tokens,
        n_past: graph.n_past,
        nodes: graph.nodes.len() as u64,
        view_nodes,
        work_nodes: graph.nodes.len() as u64 - view_nodes,
        bytes_read: categories.iter().map(|c| c.bytes_read).sum(),
        bytes_written: categories.iter().map(|c| c.bytes_written).sum(),
        flops: categories.iter().map(|c| c.flops).sum(),
        categories,
        ops: ops.into_values().collect(),
        expected,
        issues,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{ToyGraph, toy_graph};
    use crate::schema::ExpectedCount;

    #[test]
    fn counts_by_hand_on_the_toy_graph() {
        // 3 layers; per layer: norm, q, k, v (dense), attention, kv store (layout, persistent),
        // a view, o proj (dense), add, router, gate_up, down. Plus embedding, final norm, head.
        let g = toy_graph(&ToyGraph::default());
        let r = check_graph(&g);
        assert!(r.ok(), "{:?}", r.issues);
        assert_eq!(r.nodes, 3 * 12 + 3);
        assert_eq!(r.view_nodes, 3);
        assert_eq!(r.work_nodes, 3 * 11 + 3);
        assert_eq!(r.category(Category::DenseProj).nodes, 12);
        assert_eq!(r.category(Category::MoeGateUp).nodes, 3);
        assert_eq!(r.category(Category::Layout).nodes, 3);
        assert_eq!(r.category(Category::Layout).view_nodes, 3);
        assert_eq!(r.category(Category::Rope).nodes, 0);
        let matmul = r.ops.iter().find(|o| o.op == "matmul").unwrap();
        assert_eq!(matmul.nodes, 12 + 1); // dense projections + output head
        let view = r.ops.iter().find(|o| o.op == "view").unwrap();
        assert_eq!((view.nodes, view.view_nodes), (0, 3));
        assert_eq!(r.expected.len(), 2);
        assert!(r.expected.iter().all(|e| e.ok));
    }

    #[test]
    fn count_mismatch_is_an_error_with_the_derivation() {
        let mut g = toy_graph(&ToyGraph::default());
        g.expected.push(ExpectedCount {
            what: "routed-expert gate/up matmuls".into(),
            category: Some(Category::MoeGateUp),
            op: None,
            expected: 6,
            derivation: "3 layers x 2 (gate, up)".into(),
        });
        let r = check_graph(&g);
        assert!(!r.ok());
        let check = r.expected.last().unwrap();
        assert_eq!((check.expected, check.found, check.ok), (6, 3, false));
        let err = r.into_result().unwrap_err();
        assert_eq!(
            err.to_string(),
            "graph check failed for toy: routed-expert gate/up matmuls: expected 6 \
             (3 layers x 2 (gate, up)), found 3 in the graph"
        );
    }

    #[test]
    fn op_and_category_matchers_combine() {
        let mut g = toy_graph(&ToyGraph::default());
        g.expected = vec![ExpectedCount {
            what: "dense matmuls".into(),
            category: Some(Category::DenseProj),
            op: Some("matmul".into()),
            expected: 12,
            derivation: "3 layers x (q, k, v, o)".into(),
        }];
        assert!(check_graph(&g).ok());
        g.expected[0].op = Some("view".into()); // views never count
        let r = check_graph(&g);
        assert_eq!(r.expected[0].found, 0);
        g.expected[0].category = None;
        g.expected[0].op = None;
        let err = check_graph(&g).into_result().unwrap_err();
        assert_eq!(
            err.to_string(),
            "graph check failed for toy: expected count `dense matmuls` names neither a category nor an op"
        );
    }

    #[test]
    fn index_defects_are_errors() {
        let mut g = toy_graph(&ToyGraph::default());
        g.nodes[2].index = 7;
        g.nodes[3].inputs[0].src = Some(3);
        g.schema = SCHEMA_VERSION + 1;
        let r = check_graph(&g);
        assert_eq!(r.issues.len(), 3);
        let text = r.into_result().unwrap_err().to_string();
        assert!(text.contains(&format!(
            "export has schema version {}, this build reads version {}",
            SCHEMA_VERSION + 1,
            SCHEMA_VERSION
        )));
        assert!(
            text.contains("node `blk.0.attn_q` at position 2 claims index 7"),
            "{text}"
        );
        assert!(
            text.contains(
                "node 3 `blk.0.attn_k` input 0 comes from node 3, which is not an earlier node"
            ),
            "{text}"
        );
    }
}
