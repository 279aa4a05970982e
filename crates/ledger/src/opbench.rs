//! Standalone timing: each distinct op key (op, input and output shapes and dtypes) of the
//! graph is timed alone once; category time = per-call median x node count; coverage = sum of
//! categories / end-to-end median.
//!
//! MoE ops are fed realistic routing by default. On request they are timed again with
//! `first-k` routing (every token on experts 0..k-1), the common benchmark mistake, so the
//! report shows per category how much such a benchmark undercounts. Coverage near 100% proves
//! nothing by itself: errors of opposite sign cancel; the ledger shows standalone beside
//! in-graph per category so they can be seen.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::error::LedgerError;
use crate::gate::{Gate, OpSampleRecord};
use crate::graph::check_graph;
use crate::noise::NoiseConfig;
use crate::routing::{ModelRouting, RoutingAgreement, RoutingSummary, routing_summary};
use crate::schema::{GraphExport, GraphNode, Routing};
use crate::stats::Stats;
use crate::subject::{OpTimingRequest, Subject, SubjectError};

/// Shape and element type of one tensor of an op key.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct ShapeDtype {
    /// Logical shape, outermost first.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: String,
}

/// What makes two nodes the same standalone measurement.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct OpKey {
    /// Ledger category: same-shaped ops of two categories (a z-gate and a shared-expert
    /// projection in a small model) are timed apart, so each category's figures and biggest
    /// kernel come from its own nodes.
    pub category: crate::category::Category,
    /// Engine op name.
    pub op: String,
    /// Inputs in argument order.
    pub inputs: Vec<ShapeDtype>,
    /// Output.
    pub output: ShapeDtype,
}

impl OpKey {
    /// The key of a node.
    pub fn of(node: &GraphNode) -> OpKey {
        let sd = |t: &crate::schema::TensorDesc| ShapeDtype {
            shape: t.shape.clone(),
            dtype: t.dtype.clone(),
        };
        OpKey {
            category: node.category,
            op: node.op.clone(),
            inputs: node.inputs.iter().map(|i| sd(&i.tensor)).collect(),
            output: sd(&node.output),
        }
    }
}

impl fmt::Display for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sd = |s: &ShapeDtype| {
            let dims: Vec<String> = s.shape.iter().map(u64::to_string).collect();
            format!("[{}] {}", dims.join("x"), s.dtype)
        };
        let inputs: Vec<String> = self.inputs.iter().map(sd).collect();
        write!(
            f,
            "{}({}) -> {}",
            self.op,
            inputs.join(", "),
            sd(&self.output)
        )
    }
}

/// Settings of the standalone protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpbenchConfig {
    /// Routing for routed ops (default realistic).
    pub routing: Routing,
    /// Also time routed ops with first-k routing, to show the undercount.
    pub first_k: bool,
    /// Categories whose ops take a routing table.
    pub routed_categories: Vec<Category>,
    /// Untimed calls per op.
    pub warmup: usize,
    /// Timed calls per op.
    pub reps: usize,
    /// Seed for generated inputs and routing.
    pub seed: u64,
    /// Noise-gate rules.
    pub noise: NoiseConfig,
}

impl Default for OpbenchConfig {
    fn default() -> Self {
        OpbenchConfig {
            routing: Routing::Realistic,
            first_k: false,
            routed_categories: vec![Category::MoeGateUp, Category::MoeDown, Category::Router],
            warmup: 3,
            reps: 10,
            seed: 0x5EED,
            noise: NoiseConfig::default(),
        }
    }
}

/// Nodes of one category under one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryNodes {
    /// The category.
    pub category: Category,
    /// Nodes.
    pub nodes: u64,
}

/// One op key timed standalone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpTiming {
    /// The key.
    pub key: OpKey,
    /// Name of the node handed to the engine.
    pub representative: String,
    /// Non-view nodes with this key.
    pub nodes: u64,
    /// Those nodes per category.
    pub by_category: Vec<CategoryNodes>,
    /// Routing used.
    pub routing: Routing,
    /// The op takes a routing table.
    pub routed: bool,
    /// FLOPs of one call.
    pub flops_per_call: u64,
    /// Bytes read by one call.
    pub bytes_read_per_call: u64,
    /// Bytes written by one call.
    pub bytes_written_per_call: u64,
    /// Per-call statistics.
    pub stats: Stats,
    /// Every attempt, discarded ones included.
    pub samples: OpSampleRecord,
}

impl OpTiming {
    /// Per-call median x nodes.
    pub fn total_ms(&self) -> f64 {
        self.stats.median_ms * self.nodes as f64
    }

    /// Throughput of one call (None when it does no FLOPs or takes no time).
    pub fn tflops(&self) -> Option<f64> {
        tflops(self.flops_per_call, self.stats.median_ms)
    }

    fn nodes_in(&self, c: Category) -> u64 {
        self.by_category
            .iter()
            .find(|n| n.category == c)
            .map_or(0, |n| n.nodes)
    }
}

/// TFLOP/s of `flops` done in `ms`: `flops / ms / 1e9`; None when either is 0.
pub fn tflops(flops: u64, ms: f64) -> Option<f64> {
    (flops > 0 && ms > 0.0).then(|| flops as f64 / ms / 1e9)
}

/// An op the engine could not time alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnsupportedOp {
    /// The key.
    pub key: OpKey,
    /// Its nodes.
    pub nodes: u64,
    /// Categories of those nodes.
    pub by_category: Vec<CategoryNodes>,
    /// The engine's reason.
    pub reason: String,
}

/// The most expensive op key of a category (standalone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TopOp {
    /// The key, displayed.
    pub key: String,
    /// A node with that key.
    pub representative: String,
    /// Nodes of the category with that key.
    pub nodes: u64,
    /// Per-call median.
    pub per_call_ms: f64,
    /// FLOPs of one call.
    pub flops_per_call: u64,
    /// Per-call throughput.
    pub tflops: Option<f64>,
}

/// One category's standalone figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryStandalone {
    /// The category.
    pub category: Category,
    /// Timed nodes.
    pub nodes: u64,
    /// Nodes whose op could not be timed (not in `ms`).
    pub untimed_nodes: u64,
    /// Sum over keys of per-call median x nodes.
    pub ms: f64,
    /// Sum over keys of per-call IQR x nodes.
    pub spread_ms: f64,
    /// Fewest samples behind any key.
    pub samples: usize,
    /// The same sum with routed ops under first-k routing (categories with routed ops only).
    pub first_k_ms: Option<f64>,
    /// `ms - first_k_ms`: how much a first-k benchmark undercounts this category.
    pub first_k_undercount_ms: Option<f64>,
    /// The most expensive key.
    pub top_op: Option<TopOp>,
}

/// Coverage of a sum of category times against the end-to-end time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Coverage {
    /// End-to-end prefill median.
    pub e2e_ms: f64,
    /// Sum of standalone category times.
    pub sum_ms: f64,
    /// `sum_ms / e2e_ms`.
    pub coverage_ratio: f64,
    /// Sum with first-k routing, when measured.
    pub first_k_sum_ms: Option<f64>,
    /// `first_k_sum_ms / e2e_ms`.
    pub first_k_coverage_ratio: Option<f64>,
}

/// `sum_ms / e2e_ms`; None when `e2e_ms` is not positive.
pub fn coverage_ratio(sum_ms: f64, e2e_ms: f64) -> Option<f64> {
    (e2e_ms > 0.0).then(|| sum_ms / e2e_ms)
}

/// Result of [`opbench`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpbenchReport {
    /// Engine measured.
    pub engine: String,
    /// Prompt tokens of the graph.
    pub n_tokens: u64,
    /// Routing of routed ops in `ops`.
    pub routing: Routing,
    /// Every key, timed with `routing`.
    pub ops: Vec<OpTiming>,
    /// Routed keys timed again with first-k routing (empty unless requested).
    pub first_k_ops: Vec<OpTiming>,
    /// Keys the engine could not time.
    pub unsupported: Vec<UnsupportedOp>,
    /// Per category, in [`Category::ALL`] order.
    pub categories: Vec<CategoryStandalone>,
    /// Sum of category times.
    pub total_ms: f64,
    /// Sum with first-k routing, when measured.
    pub total_first_k_ms: Option<f64>,
    /// What each routing mode's table exercises at this prompt length.
    pub routing_tables: Vec<RoutingSummary>,
    /// Under `model`: how each other engine's own routing of the prompt agrees with the
    /// recorded tables the timings used (empty when no other engine could record one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing_agreement: Vec<RoutingAgreement>,
    /// Against the end-to-end time, once known.
    pub coverage: Option<Coverage>,
    /// Discarded attempts over all keys.
    pub discards: usize,
    /// Some key's retry budget ran out.
    pub exhausted: bool,
}

impl OpbenchReport {
    /// Fills `coverage` from the end-to-end prefill median.
    pub fn set_coverage(&mut self, e2e_ms: f64) {
        self.coverage = coverage_ratio(self.total_ms, e2e_ms).map(|coverage| Coverage {
            e2e_ms,
            sum_ms: self.total_ms,
            coverage_ratio: coverage,
            first_k_sum_ms: self.total_first_k_ms,
            first_k_coverage_ratio: self
                .total_first_k_ms
                .and_then(|s| coverage_ratio(s, e2e_ms)),
        });
    }

    /// The category's figure, if the graph has it.
    pub fn category(&self, c: Category) -> Option<&CategoryStandalone> {
        self.categories.iter().find(|x| x.category == c)
    }
}

fn by_category(nodes: &[&GraphNode]) -> Vec<CategoryNodes> {
    let mut m: BTreeMap<Category, u64> = BTreeMap::new();
    for n in nodes {
        *m.entry(n.category).or_default() += 1;
    }
    m.into_iter()
        .map(|(category, nodes)| CategoryNodes { category, nodes })
        .collect()
}

/// Times every distinct op key of `graph` standalone through `subject`. Under
/// [`Routing::Model`], `recorded` is the model's routing of the measured batch (required when
/// the graph has routed ops): each routed key is fed the table [`ModelRouting::pick`] chooses
/// for its nodes' layers.
pub fn opbench(
    subject: &mut dyn Subject,
    graph: &GraphExport,
    cfg: &OpbenchConfig,
    recorded: Option<&ModelRouting>,
) -> Result<OpbenchReport, LedgerError> {
    let checked = check_graph(graph).into_result()?;
    if checked.work_nodes == 0 {
        return Err(LedgerError::EmptyGraph {
            engine: checked.engine,
            nodes: graph.nodes.len(),
        });
    }
    if cfg.reps == 0 {
        return Err(LedgerError::Config(
            "opbench: reps must be at least 1".into(),
        ));
    }
    let recorded = if cfg.routing == Routing::Model {
        let r = recorded.ok_or(LedgerError::ModelRouting)?;
        if r.n_tokens as u64 != graph.n_tokens {
            return Err(LedgerError::RecordedRouting {
                what: format!(
                    "recorded for {} tokens, the graph has {}",
                    r.n_tokens, graph.n_tokens
                ),
            });
        }
        Some(r)
    } else {
        None
    };
    let mut gate = Gate::from_config(&cfg.noise)?;
    let mut keys: BTreeMap<OpKey, Vec<&GraphNode>> = BTreeMap::new();
    for n in graph.nodes.iter().filter(|n| !n.is_view) {
        keys.entry(OpKey::of(n)).or_default().push(n);
    }
    let mut ops = Vec::new();
    let mut first_k_ops = Vec::new();
    let mut unsupported = Vec::new();
    for (key, nodes) in keys {
        let rep = nodes[0];
        let routed = nodes
            .iter()
            .any(|n| cfg.routed_categories.contains(&n.category));
        let mut routings = vec![cfg.routing];
        if routed && cfg.first_k && cfg.routing != Routing::FirstK {
            routings.push(Routing::FirstK);
        }
        let layers: Vec<u32> = nodes.iter().filter_map(|n| n.layer).collect();
        for (i, routing) in routings.into_iter().enumerate() {
            let req = OpTimingRequest {
                node: rep,
                routing,
                recorded: recorded.filter(|_| routed && routing == Routing::Model),
                layers: &layers,
                seed: cfg.seed,
                warmup: cfg.warmup,
                reps: cfg.reps,
            };
            let samples = match gate.time_op(subject, &req) {
                Ok(s) => s,
                Err(LedgerError::Subject(SubjectError::Unsupported { reason, .. })) => {
                    if i == 0 {
                        unsupported.push(UnsupportedOp {
                            key: key.clone(),
                            nodes: nodes.len() as u64,
                            by_category: by_category(&nodes),
                            reason,
                        });
                    }
                    break;
                }
                Err(e) => return Err(e),
            };
            let Some(stats) = Stats::of(samples.used_samples()) else {
                return Err(LedgerError::BadSample {
                    engine: checked.engine.clone(),
                    what: format!("time_op {}", rep.name),
                    value_ms: f64::NAN,
                });
            };
            let timing = OpTiming {
                key: key.clone(),
                representative: rep.name.clone(),
                nodes: nodes.len() as u64,
                by_category: by_category(&nodes),
                routing,
                routed,
                flops_per_call: rep.flops,
                bytes_read_per_call: rep.bytes_read,
                bytes_written_per_call: rep.bytes_written,
                stats,
                samples,
            };
            if i == 0 {
                ops.push(timing);
            } else {
                first_k_ops.push(timing);
            }
        }
    }
    let categories = aggregate(&ops, &first_k_ops, &unsupported, cfg.first_k);
    let total_ms = categories.iter().map(|c| c.ms).sum();
    let total_first_k_ms = (cfg.first_k && !first_k_ops.is_empty()).then(|| {
        categories
            .iter()
            .map(|c| c.first_k_ms.unwrap_or(c.ms))
            .sum()
    });
    let model = &graph.engine.model;
    let mut routing_tables = Vec::new();
    if model.n_experts > 0 && model.n_experts_used > 0 {
        if let Some(r) = recorded {
            routing_tables.push(r.summary(&[])?);
        }
        let mut modes = vec![Routing::Realistic];
        if cfg.first_k || cfg.routing == Routing::FirstK {
            modes.push(Routing::FirstK);
        }
        for routing in modes {
            routing_tables.push(routing_summary(
                graph.n_tokens as usize,
                model.n_experts as usize,
                model.n_experts_used as usize,
                routing,
                cfg.seed,
            )?);
        }
    }
    Ok(OpbenchReport {
        engine: checked.engine,
        n_tokens: graph.n_tokens,
        routing: cfg.routing,
        discards: ops
            .iter()
            .chain(&first_k_ops)
            .map(|o| o.samples.discards())
            .sum(),
        exhausted: ops.iter().chain(&first_k_ops).any(|o| o.samples.exhausted),
        ops,
        first_k_ops,
        unsupported,
        categories,
        total_ms,
        total_first_k_ms,
        routing_tables,
        routing_agreement: Vec::new(),
        coverage: None,
    })
}

/// Per-category sums: time = per-call median x nodes of that category, over keys.
pub fn aggregate(
    ops: &[OpTiming],
    first_k_ops: &[OpTiming],
    unsupported: &[UnsupportedOp],
    first_k: bool,
) -> Vec<CategoryStandalone> {
    let mut out = Vec::new();
    for c in Category::ALL {
        let nodes: u64 = ops.iter().map(|o| o.nodes_in(c)).sum();
        let untimed: u64 = unsupported
            .iter()
            .flat_map(|u| &u.by_category)
            .filter(|n| n.category == c)
            .map(|n| n.nodes)
            .sum();
        if nodes == 0 && untimed == 0 {
            continue;
        }
        let mut ms = 0.0;
        let mut spread_ms = 0.0;
        let mut first_k_ms = 0.0;
        let mut any_routed = false;
        let mut top: Option<TopOp> = None;
        for o in ops.iter().filter(|o| o.nodes_in(c) > 0) {
            let n = o.nodes_in(c) as f64;
            ms += o.stats.median_ms * n;
            spread_ms += o.stats.iqr_ms * n;
            let fk = first_k_ops.iter().find(|f| f.key == o.key);
            any_routed |= fk.is_some();
            first_k_ms += fk.map_or(o.stats.median_ms, |f| f.stats.median_ms) * n;
            let cost = o.stats.median_ms * n;
            if top
                .as_ref()
                .is_none_or(|t| cost > t.per_call_ms * t.nodes as f64)
            {
                top = Some(TopOp {
                    key: o.key.to_string(),
                    representative: o.representative.clone(),
                    nodes: o.nodes_in(c),
                    per_call_ms: o.stats.median_ms,
                    flops_per_call: o.flops_per_call,
                    tflops: o.tflops(),
                });
            }
        }
        let with_first_k = first_k && any_routed;
        out.push(CategoryStandalone {
            category: c,
            nodes,
            untimed_nodes: untimed,
            ms,
            spread_ms,
            samples: ops
                .iter()
                .filter(|o| o.nodes_in(c) > 0)
                .map(|o| o.stats.n)
                .min()
                .unwrap_or(0),
            first_k_ms: with_first_k.then_some(first_k_ms),
            first_k_undercount_ms: with_first_k.then_some(ms - first_k_ms),
            top_op: top,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeCall, FakeCosts, FakeSubject, ToyGraph, toy_graph};
    use crate::noise::ProbeChoice;

    fn quiet() -> NoiseConfig {
        NoiseConfig {
            probe: ProbeChoice::Off,
            ..NoiseConfig::default()
        }
    }

    fn fake() -> FakeSubject {
        let mut costs = FakeCosts::default();
        costs.node_ms.insert(Category::DenseProj, 0.5);
        costs.node_ms.insert(Category::MoeGateUp, 2.0);
        costs.node_ms.insert(Category::MoeDown, 1.0);
        costs.node_ms.insert(Category::Norm, 0.1);
        costs.standalone_ratio.insert(Category::Norm, 2.0); // small ops overcount alone
        costs.gap_ms = 1.0;
        FakeSubject::new(toy_graph(&ToyGraph::default()), costs)
    }

    #[test]
    fn category_times_and_coverage_by_hand() {
        let mut s = fake();
        let g = s.graph.clone();
        let cfg = OpbenchConfig {
            first_k: true,
            noise: quiet(),
            ..OpbenchConfig::default()
        };
        let mut r = opbench(&mut s, &g, &cfg, None).unwrap();
        // Dense: 12 nodes (every layer computes all rows, so q/k/v/o share one key) x 0.5 ms.
        let dense = r.category(Category::DenseProj).unwrap();
        assert_eq!((dense.nodes, dense.ms, dense.spread_ms), (12, 6.0, 0.0));
        // MoE gate/up: 3 x 2.0 = 6.0 realistic; first-k 0.6x -> 3.6; undercount 2.4.
        let gu = r.category(Category::MoeGateUp).unwrap();
        assert_eq!(gu.ms, 6.0);
        assert!((gu.first_k_ms.unwrap() - 3.6).abs() < 1e-12);
        assert!((gu.first_k_undercount_ms.unwrap() - 2.4).abs() < 1e-12);
        // Norm: 4 nodes (3 attn_norm + output_norm) x 0.1 x 2 = 0.8 (standalone overcounts).
        assert!((r.category(Category::Norm).unwrap().ms - 0.8).abs() < 1e-12);
        assert_eq!(r.category(Category::Norm).unwrap().first_k_ms, None);
        // Total: 6 + 6 + 3 (down) + 0.8 = 15.8; first-k: 6 + 3.6 + 1.8 + 0.8 = 12.2.
        assert!((r.total_ms - 15.8).abs() < 1e-12);
        assert!((r.total_first_k_ms.unwrap() - 12.2).abs() < 1e-12);
        // e2e plain = 6 + 6 + 3 + 0.4 + gap 1 = 16.4.
        r.set_coverage(s.plain_ms());
        let cov = r.coverage.as_ref().unwrap();
        assert!((cov.coverage_ratio - 15.8 / 16.4).abs() < 1e-12);
        assert!((cov.first_k_coverage_ratio.unwrap() - 12.2 / 16.4).abs() < 1e-12);
        // 8 tokens x top-2: realistic routing spreads 16 pairs over many experts; first-k on 2.
        assert!(r.routing_tables[0].histogram.experts_touched > 4);
        assert_eq!(r.routing_tables[1].histogram.experts_touched, 2);
    }

    #[test]
    fn each_key_is_timed_once_and_routed_ops_get_realistic_routing() {
        let mut s = fake();
        let g = s.graph.clone();
        let cfg = OpbenchConfig {
            noise: quiet(),
            ..OpbenchConfig::default()
        };
        let r = opbench(&mut s, &g, &cfg, None).unwrap();
        let timed: Vec<&FakeCall> = s
            .calls
            .iter()
            .filter(|c| matches!(c, FakeCall::TimeOp(..)))
            .collect();
        assert_eq!(timed.len(), r.ops.len());
        assert!(r.first_k_ops.is_empty());
        // The toy has 10 distinct keys: embedding, norm (output_norm shares it), dense (q, k,
        // v, o share shapes), kv store, attention, add, router, gate_up, down, output head.
        assert_eq!(r.ops.len(), 10);
        let gu = r
            .ops
            .iter()
            .find(|o| o.key.op == "moe_matmul" && o.by_category[0].category == Category::MoeGateUp)
            .unwrap();
        assert!(gu.routed);
        assert_eq!(gu.routing, Routing::Realistic);
        let top = r
            .category(Category::DenseProj)
            .unwrap()
            .top_op
            .as_ref()
            .unwrap();
        // 2*8*64*64 FLOPs in 0.5 ms = 65536 / 0.5 / 1e9 TFLOP/s.
        assert_eq!(top.tflops, Some(65536.0 / 0.5 / 1e9));
    }

    /// 8 tokens x top-2 of 16 experts in layers 0, 1, 2 whose busiest experts take 8, 2 and 5
    /// tokens: the median layer is 2.
    fn recorded() -> ModelRouting {
        let spread = |t: u32| [(2 * t) % 16, (2 * t + 1) % 16];
        let table = |busy: u32| -> Vec<u32> {
            (0..8u32)
                .flat_map(|t| {
                    // The first `busy` tokens share expert 15 as their second expert.
                    let [a, b] = spread(t);
                    if t < busy { [a % 14, 15] } else { [a, b % 14] }
                })
                .collect()
        };
        let layers = [(0, 8), (1, 2), (2, 5)]
            .into_iter()
            .map(|(layer, busy)| crate::routing::LayerTable {
                layer,
                n_tokens: 8,
                ids: table(busy),
            })
            .collect();
        ModelRouting::new("toy".into(), 8, 16, 2, layers).unwrap()
    }

    #[test]
    fn model_routing_feeds_the_median_layers_table_to_every_routed_key() {
        let mut s = fake();
        let g = s.graph.clone();
        let cfg = OpbenchConfig {
            routing: Routing::Model,
            first_k: true,
            noise: quiet(),
            ..OpbenchConfig::default()
        };
        let rec = recorded();
        let r = opbench(&mut s, &g, &cfg, Some(&rec)).unwrap();
        let median = rec.layers[2].ids.clone();
        let fed: Vec<&str> = s.fed_tables.iter().map(|(n, _)| n.as_str()).collect();
        // gate/up, down and the router's key: the routed categories; nothing else.
        assert_eq!(fed.len(), 3, "{fed:?}");
        assert!(s.fed_tables.iter().all(|(_, t)| *t == median));
        let gu = r
            .ops
            .iter()
            .find(|o| o.by_category[0].category == Category::MoeGateUp)
            .unwrap();
        assert_eq!(gu.routing, Routing::Model);
        // first-k is still timed beside it, with a generated table.
        assert!(r.first_k_ops.iter().all(|o| o.routing == Routing::FirstK));
        let t = &r.routing_tables[0];
        assert_eq!((t.routing, t.layer), (Routing::Model, Some(2)));
        assert_eq!(t.recorded_by.as_deref(), Some("toy"));
        assert_eq!(t.histogram.max_tokens_per_expert, 5);
    }

    #[test]
    fn model_routing_needs_a_recorded_table_of_the_graphs_tokens() {
        let mut s = fake();
        let g = s.graph.clone();
        let cfg = OpbenchConfig {
            routing: Routing::Model,
            noise: quiet(),
            ..OpbenchConfig::default()
        };
        let e = opbench(&mut s, &g, &cfg, None).unwrap_err();
        assert!(e.to_string().contains("routing `model`"), "{e}");
        let mut rec = recorded();
        rec.n_tokens = 7;
        let e = opbench(&mut s, &g, &cfg, Some(&rec)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "recorded routing: recorded for 7 tokens, the graph has 8"
        );
    }

    #[test]
    fn bad_config_and_graph_are_errors() {
        let mut s = fake();
        let mut g = s.graph.clone();
        let cfg = OpbenchConfig {
            reps: 0,
            noise: quiet(),
            ..OpbenchConfig::default()
        };
        assert_eq!(
            opbench(&mut s, &g, &cfg, None).unwrap_err().to_string(),
            "invalid configuration: opbench: reps must be at least 1"
        );
        g.expected[0].expected = 99;
        let err = opbench(&mut s, &g, &OpbenchConfig::default(), None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("graph check failed for toy: dense projections: expected 99")
        );
    }
}
