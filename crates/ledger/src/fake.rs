//! Deterministic stand-ins for an engine: a toy graph builder and a [`FakeSubject`] whose
//! timings are exact functions of the run mode, so every protocol's arithmetic can be checked
//! by hand. Public so the CLI can run the whole method without a model (`--fake`) and other
//! crates can test against it.

use std::collections::BTreeMap;

use crate::category::Category;
use crate::routing::ModelRouting;
use crate::schema::{
    EngineInfo, ExpectedCount, GraphExport, GraphNode, ModelFacts, NodeInput, Routing, RowDep,
    SCHEMA_VERSION, TensorDesc,
};
use crate::subject::{
    CategorySet, OpTimingRequest, RunMode, RunOutcome, Subject, SubjectError, Workload,
};

/// Shape of the toy graph: a small attention + MoE transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToyGraph {
    /// Engine name in the export.
    pub engine: String,
    /// Layers.
    pub n_layers: u32,
    /// Tokens of the batch (the prompt of a prefill).
    pub n_tokens: u64,
    /// Context tokens before the batch (0: a prefill; D with `n_tokens` 1: a decode step).
    pub n_past: u64,
    /// Hidden size (a multiple of 16).
    pub hidden: u64,
    /// Routed experts.
    pub n_experts: u64,
    /// Experts per token.
    pub k: u64,
    /// Expert FFN width.
    pub ffn: u64,
    /// Vocabulary.
    pub n_vocab: u64,
    /// Dense weight format: `(name, params per block, bytes per block)`.
    pub dense_quant: (&'static str, u64, u64),
    /// The last layer computes every row (dead work) instead of the last token only.
    pub last_layer_all_rows: bool,
    /// Adds `blk.0.attn_debug_copy`, a copy nothing reads.
    pub dead_node: bool,
}

impl Default for ToyGraph {
    fn default() -> Self {
        ToyGraph {
            engine: "toy".into(),
            n_layers: 3,
            n_tokens: 8,
            n_past: 0,
            hidden: 64,
            n_experts: 16,
            k: 2,
            ffn: 32,
            n_vocab: 128,
            dense_quant: ("q4_k", 256, 144),
            last_layer_all_rows: true,
            dead_node: false,
        }
    }
}

fn tensor(name: &str, shape: &[u64], dtype: &str) -> TensorDesc {
    TensorDesc {
        name: name.to_string(),
        shape: shape.to_vec(),
        dtype: dtype.to_string(),
    }
}

/// A bare node for hand-built graphs: f32 `[rows, 4]` output, one f32 input per `(src, dep)`,
/// 16 bytes read and written per row and input, 4 FLOPs per row.
pub fn node(
    index: u32,
    name: &str,
    category: Category,
    rows: Option<u64>,
    inputs: &[(u32, RowDep)],
) -> GraphNode {
    let r = rows.unwrap_or(1);
    GraphNode {
        index,
        name: name.to_string(),
        op: "op".into(),
        category,
        layer: None,
        inputs: inputs
            .iter()
            .map(|&(src, dep)| NodeInput {
                tensor: tensor(&format!("in{src}"), &[r, 4], "f32"),
                src: Some(src),
                rows: dep,
            })
            .collect(),
        output: tensor(name, &[r, 4], "f32"),
        rows,
        is_view: false,
        persistent: false,
        is_output: false,
        bytes_read: 16 * r * inputs.len() as u64,
        bytes_written: 16 * r,
        weight_bytes: 0,
        weight_params: 0,
        flops: 4 * r,
    }
}

struct Builder {
    nodes: Vec<GraphNode>,
}

struct Spec<'a> {
    name: String,
    op: &'a str,
    category: Category,
    layer: Option<u32>,
    rows: u64,
    width: u64,
    inputs: Vec<(u32, RowDep)>,
    weight: Option<(String, Vec<u64>, &'a str, u64, u64)>, // name, shape, dtype, params, bytes
    flops: u64,
}

impl Builder {
    fn push(&mut self, s: Spec<'_>) -> u32 {
        let index = self.nodes.len() as u32;
        let mut inputs: Vec<NodeInput> = s
            .inputs
            .iter()
            .map(|&(src, dep)| {
                let p = &self.nodes[src as usize];
                NodeInput {
                    tensor: p.output.clone(),
                    src: Some(src),
                    rows: dep,
                }
            })
            .collect();
        let act_read: u64 = inputs
            .iter()
            .map(|i| i.tensor.shape.iter().product::<u64>() * 4)
            .sum();
        let (mut weight_bytes, mut weight_params) = (0, 0);
        if let Some((name, shape, dtype, params, bytes)) = s.weight {
            inputs.push(NodeInput {
                tensor: tensor(&name, &shape, dtype),
                src: None,
                rows: RowDep::All,
            });
            weight_params = params;
            weight_bytes = bytes;
        }
        self.nodes.push(GraphNode {
            index,
            name: s.name.clone(),
            op: s.op.to_string(),
            category: s.category,
            layer: s.layer,
            inputs,
            output: tensor(&s.name, &[s.rows, s.width], "f32"),
            rows: Some(s.rows),
            is_view: false,
            persistent: false,
            is_output: false,
            bytes_read: act_read + weight_bytes,
            bytes_written: s.rows * s.width * 4,
            weight_bytes,
            weight_params,
            flops: s.flops,
        });
        index
    }
}

/// Builds the toy graph. Per layer, in order: `attn_norm`, `attn_q`, `attn_k`, `attn_v`,
/// `kv_store` (persistent), `kv_view` (view), `attn`, `attn_output`, `attn_residual`,
/// `ffn_router`, `moe_gate_up`, `moe_down` (12 nodes; plus `attn_debug_copy` in layer 0 when
/// `dead_node`). Before: `token_embd`; after: `output_norm`, `output` (1 row, the logits).
pub fn toy_graph(cfg: &ToyGraph) -> GraphExport {
    let (n, d, e, k, f) = (cfg.n_tokens, cfg.hidden, cfg.n_experts, cfg.k, cfg.ffn);
    let (qname, block_params, block_bytes) = cfg.dense_quant;
    let quant = |params: u64| params / block_params * block_bytes;
    let mut b = Builder { nodes: Vec::new() };
    let spec = |name: String, op, category, layer, rows, width| Spec {
        name,
        op,
        category,
        layer,
        rows,
        width,
        inputs: Vec::new(),
        weight: None,
        flops: 0,
    };
    let mut h = b.push(Spec {
        weight: Some((
            "token_embd.weight".into(),
            vec![cfg.n_vocab, d],
            "f32",
            n * d,
            n * d * 4,
        )),
        ..spec(
            "token_embd".into(),
            "get_rows",
            Category::Embedding,
            None,
            n,
            d,
        )
    });
    for l in 0..cfg.n_layers {
        let last = l + 1 == cfg.n_layers;
        let r = if last && !cfg.last_layer_all_rows {
            1
        } else {
            n
        };
        let p = |s: &str| format!("blk.{l}.{s}");
        let layer = Some(l);
        let norm = b.push(Spec {
            inputs: vec![(h, RowDep::Same)],
            weight: Some((p("attn_norm.weight"), vec![d], "f32", d, d * 4)),
            flops: 4 * n * d,
            ..spec(p("attn_norm"), "rms_norm", Category::Norm, layer, n, d)
        });
        let dense = |b: &mut Builder, name: &str, rows: u64, input: u32| {
            b.push(Spec {
                inputs: vec![(input, RowDep::Same)],
                weight: Some((
                    p(&format!("{name}.weight")),
                    vec![d, d],
                    qname,
                    d * d,
                    quant(d * d),
                )),
                flops: 2 * rows * d * d,
                ..spec(p(name), "matmul", Category::DenseProj, layer, rows, d)
            })
        };
        let q = dense(&mut b, "attn_q", r, norm);
        let kk = dense(&mut b, "attn_k", n, norm);
        let v = dense(&mut b, "attn_v", n, norm);
        let store = b.push(Spec {
            inputs: vec![(kk, RowDep::Same), (v, RowDep::Same)],
            ..spec(p("kv_store"), "cpy", Category::Layout, layer, n, 2 * d)
        });
        b.nodes[store as usize].persistent = true;
        let view = b.push(Spec {
            inputs: vec![(store, RowDep::All)],
            ..spec(p("kv_view"), "view", Category::Layout, layer, n, 2 * d)
        });
        let vn = &mut b.nodes[view as usize];
        vn.is_view = true;
        (vn.bytes_read, vn.bytes_written) = (0, 0);
        let attn = b.push(Spec {
            inputs: vec![(q, RowDep::Same), (view, RowDep::All)],
            flops: 4 * r * n * d,
            ..spec(p("attn"), "attention", Category::Attention, layer, r, d)
        });
        if cfg.dead_node && l == 0 {
            b.push(Spec {
                inputs: vec![(attn, RowDep::Same)],
                ..spec(p("attn_debug_copy"), "cpy", Category::Layout, layer, r, d)
            });
        }
        let o = dense(&mut b, "attn_output", r, attn);
        let res = b.push(Spec {
            inputs: vec![(h, RowDep::Same), (o, RowDep::Same)],
            flops: r * d,
            ..spec(
                p("attn_residual"),
                "add",
                Category::Elementwise,
                layer,
                r,
                d,
            )
        });
        let router = b.push(Spec {
            inputs: vec![(res, RowDep::Same)],
            weight: Some((
                p("ffn_gate_inp.weight"),
                vec![e, d],
                "f32",
                e * d,
                e * d * 4,
            )),
            flops: 2 * r * d * e,
            ..spec(p("ffn_router"), "router", Category::Router, layer, r, 2 * k)
        });
        let gu_params = e * 2 * f * d;
        let gate_up = b.push(Spec {
            inputs: vec![(res, RowDep::Same), (router, RowDep::Same)],
            weight: Some((
                p("ffn_gate_up_exps.weight"),
                vec![e, 2 * f, d],
                qname,
                gu_params,
                quant(gu_params),
            )),
            flops: 2 * r * k * 2 * f * d,
            ..spec(
                p("moe_gate_up"),
                "moe_matmul",
                Category::MoeGateUp,
                layer,
                r,
                k * 2 * f,
            )
        });
        let down_params = e * d * f;
        h = b.push(Spec {
            inputs: vec![
                (gate_up, RowDep::Same),
                (router, RowDep::Same),
                (res, RowDep::Same),
            ],
            weight: Some((
                p("ffn_down_exps.weight"),
                vec![e, d, f],
                qname,
                down_params,
                quant(down_params),
            )),
            flops: 2 * r * k * f * d + r * d,
            ..spec(p("moe_down"), "moe_matmul", Category::MoeDown, layer, r, d)
        });
    }
    let r = if cfg.last_layer_all_rows { n } else { 1 };
    let norm = b.push(Spec {
        inputs: vec![(h, RowDep::Same)],
        weight: Some(("output_norm.weight".into(), vec![d], "f32", d, d * 4)),
        flops: 4 * r * d,
        ..spec("output_norm".into(), "rms_norm", Category::Norm, None, r, d)
    });
    let vocab_params = cfg.n_vocab * d;
    let out = b.push(Spec {
        inputs: vec![(norm, RowDep::Same)],
        weight: Some((
            "output.weight".into(),
            vec![cfg.n_vocab, d],
            qname,
            vocab_params,
            quant(vocab_params),
        )),
        flops: 2 * d * cfg.n_vocab,
        ..spec(
            "output".into(),
            "matmul",
            Category::OutputHead,
            None,
            1,
            cfg.n_vocab,
        )
    });
    b.nodes[out as usize].is_output = true;
    let layers = u64::from(cfg.n_layers);
    GraphExport {
        schema: SCHEMA_VERSION,
        engine: toy_engine(cfg),
        n_tokens: n,
        n_past: cfg.n_past,
        nodes: b.nodes,
        expected: vec![
            ExpectedCount {
                what: "dense projections".into(),
                category: Some(Category::DenseProj),
                op: None,
                expected: 4 * layers,
                derivation: format!("{layers} layers x 4 (q, k, v, o)"),
            },
            ExpectedCount {
                what: "routed-expert gate/up matmuls".into(),
                category: Some(Category::MoeGateUp),
                op: Some("moe_matmul".into()),
                expected: layers,
                derivation: format!("{layers} layers x 1 (fused gate/up)"),
            },
        ],
        notes: vec!["toy graph built by tally_ledger::fake".into()],
    }
}

fn toy_engine(cfg: &ToyGraph) -> EngineInfo {
    EngineInfo {
        engine: cfg.engine.clone(),
        version: "0.0.0-fake".into(),
        backend: "cpu".into(),
        device: "fake device".into(),
        threads: Some(1),
        options: Vec::new(),
        model: ModelFacts {
            path: "toy.gguf".into(),
            file_bytes: 0,
            arch: "toy".into(),
            n_layers: cfg.n_layers,
            n_vocab: cfg.n_vocab as u32,
            n_experts: cfg.n_experts as u32,
            n_experts_used: cfg.k as u32,
        },
    }
}

/// Costs of the fake engine. All timings are exact functions of these.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCosts {
    /// In-graph time of one node of each category (missing: 0).
    pub node_ms: BTreeMap<Category, f64>,
    /// Plain-run time outside the nodes (launch gaps, host work).
    pub gap_ms: f64,
    /// Added per observed node by `Observe` (the barrier).
    pub observe_barrier_ms: f64,
    /// Added per replayed dispatch (its barriers).
    pub replay_barrier_ms: f64,
    /// Added once to every run that replays anything, whatever the count (a fixed cost of
    /// entering replay, such as llama.cpp's peer building a one-node graph per node).
    pub replay_entry_ms: f64,
    /// Standalone per-call time over in-graph per-node time, per category (missing: 1).
    pub standalone_ratio: BTreeMap<Category, f64>,
    /// Standalone MoE time under first-k routing over realistic routing.
    pub first_k_ratio: f64,
    /// Decode time per generated token.
    pub decode_ms_per_token: f64,
}

impl Default for FakeCosts {
    fn default() -> Self {
        FakeCosts {
            node_ms: BTreeMap::new(),
            gap_ms: 0.0,
            observe_barrier_ms: 0.0,
            replay_barrier_ms: 0.0,
            replay_entry_ms: 0.0,
            standalone_ratio: BTreeMap::new(),
            first_k_ratio: 0.6,
            decode_ms_per_token: 1.0,
        }
    }
}

/// Misbehaviours to inject.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeFaults {
    /// Replaying `k` times costs `k^replay_power` replays (1: linear).
    pub replay_power: f64,
    /// Replaying this category changes the output digest.
    pub replay_changes_digest: Option<Category>,
    /// Observing this category changes the output digest (a fusion split at the barrier, as
    /// llama.cpp's CUDA backend shows); replay then equals observe.
    pub observe_changes_digest: Option<Category>,
    /// Replaying this category makes the run faster (as in-place ops can).
    pub replay_speeds_up: Option<Category>,
    /// `busy_reason` answers busy for the first this-many calls.
    pub busy_checks: usize,
    /// These prefill calls (0-based, counting every prefill) take 10x.
    pub spike_prefills: Vec<usize>,
    /// These prefill calls (0-based, counting every prefill) return another output digest.
    pub odd_digest_prefills: Vec<usize>,
    /// Plain/observe runs report this many fewer dispatches than work nodes.
    pub missing_dispatches: u64,
    /// The machine is still settling: prefill call i < n takes `1 + 0.5 (n - i) / n` times as
    /// long (a warm-up that fades linearly over the first n prefills).
    pub warming_prefills: usize,
    /// A host that switches speed levels: with `(period, factor)`, prefill calls in every
    /// other block of `period` calls (the second, the fourth, ...) take `factor` times as long.
    pub level_switch: Option<(usize, f64)>,
    /// A host that is slower for as long as one category's replay group runs: with
    /// `(category, factor)`, from a run that observes or replays `category` alone until a run
    /// that observes or replays anything else, every prefill (plain ones included) takes
    /// `factor` times as long.
    pub slow_group: Option<(Category, f64)>,
    /// The engine cannot tell the time inside its nodes (`in_node_ms` is None), as in records
    /// made before it was asked.
    pub no_node_time: bool,
}

impl Default for FakeFaults {
    fn default() -> Self {
        FakeFaults {
            replay_power: 1.0,
            replay_changes_digest: None,
            observe_changes_digest: None,
            replay_speeds_up: None,
            busy_checks: 0,
            spike_prefills: Vec::new(),
            odd_digest_prefills: Vec::new(),
            missing_dispatches: 0,
            warming_prefills: 0,
            level_switch: None,
            slow_group: None,
            no_node_time: false,
        }
    }
}

fn observed_set(mode: &RunMode) -> Option<&CategorySet> {
    match mode {
        RunMode::Plain => None,
        RunMode::Observe(s) => Some(s),
        RunMode::Replay { categories, .. } => Some(categories),
    }
}

/// A call the fake received (for order checks).
#[derive(Debug, Clone, PartialEq)]
pub enum FakeCall {
    /// The state after a context of this many tokens restored, before a `prefill` run.
    Restore(usize),
    /// `prefill` with this mode.
    Prefill(RunMode),
    /// `decode` of this many tokens.
    Decode(usize),
    /// `time_op` of this node name and routing.
    TimeOp(String, Routing),
}

/// A subject whose timings are deterministic functions of the mode:
/// plain = sum of node costs + gap; observe(S) adds `observe_barrier_ms` per node of S;
/// replay(S, k) adds `k^p * (node costs of S + replay_barrier_ms per node of S)`.
#[derive(Debug, Clone)]
pub struct FakeSubject {
    /// The graph it reports and "runs".
    pub graph: GraphExport,
    /// Its costs.
    pub costs: FakeCosts,
    /// Its faults.
    pub faults: FakeFaults,
    /// Every call received, in order.
    pub calls: Vec<FakeCall>,
    /// Contexts restored (one before each run of a batch at depth).
    pub restores: usize,
    /// What `model_routing` answers (`None`: it cannot record one).
    pub routing: Option<ModelRouting>,
    /// Every recorded table a standalone timing was fed: (node name, table).
    pub fed_tables: Vec<(String, Vec<u32>)>,
    prefills: usize,
    /// Inside the `slow_group` fault's group.
    in_slow_group: bool,
    busy_checks: usize,
}

/// The digest every correct fake run returns.
pub const FAKE_DIGEST: u64 = 0x7A11_7A11_0000_0001;

impl FakeSubject {
    /// A fake over `graph` with `costs` and no faults.
    pub fn new(graph: GraphExport, costs: FakeCosts) -> FakeSubject {
        FakeSubject {
            graph,
            costs,
            faults: FakeFaults::default(),
            calls: Vec::new(),
            restores: 0,
            routing: None,
            fed_tables: Vec::new(),
            prefills: 0,
            in_slow_group: false,
            busy_checks: 0,
        }
    }

    /// Work nodes of a category.
    pub fn nodes_in(&self, c: Category) -> u64 {
        self.graph
            .nodes
            .iter()
            .filter(|n| !n.is_view && n.category == c)
            .count() as u64
    }

    /// In-graph time of all nodes of a category.
    pub fn category_ms(&self, c: Category) -> f64 {
        self.nodes_in(c) as f64 * self.costs.node_ms.get(&c).copied().unwrap_or(0.0)
    }

    /// The plain-run time.
    pub fn plain_ms(&self) -> f64 {
        Category::ALL
            .iter()
            .map(|&c| self.category_ms(c))
            .sum::<f64>()
            + self.costs.gap_ms
    }

    fn work_nodes(&self) -> u64 {
        self.graph.nodes.iter().filter(|n| !n.is_view).count() as u64
    }
}

impl Subject for FakeSubject {
    fn info(&self) -> EngineInfo {
        self.graph.engine.clone()
    }

    fn graph(&mut self, w: Workload) -> Result<GraphExport, SubjectError> {
        let n_tokens = w.n_tokens;
        if n_tokens as u64 != self.graph.n_tokens {
            return Err(SubjectError::Engine {
                engine: self.graph.engine.engine.clone(),
                message: format!(
                    "fake graph is built for {} tokens, asked for {n_tokens}",
                    self.graph.n_tokens
                ),
            });
        }
        if w.n_past as u64 != self.graph.n_past {
            return Err(SubjectError::Engine {
                engine: self.graph.engine.engine.clone(),
                message: format!(
                    "fake graph is built at position {}, asked for {}",
                    self.graph.n_past, w.n_past
                ),
            });
        }
        Ok(self.graph.clone())
    }

    fn prefill(
        &mut self,
        context: &[u32],
        _tokens: &[u32],
        mode: &RunMode,
    ) -> Result<RunOutcome, SubjectError> {
        if context.len() as u64 != self.graph.n_past {
            return Err(SubjectError::Engine {
                engine: self.graph.engine.engine.clone(),
                message: format!(
                    "fake graph runs after {} context tokens, given {}",
                    self.graph.n_past,
                    context.len()
                ),
            });
        }
        if !context.is_empty() {
            self.restores += 1;
            self.calls.push(FakeCall::Restore(context.len()));
        }
        self.calls.push(FakeCall::Prefill(mode.clone()));
        let mut wall_ms = self.plain_ms();
        let mut digest = FAKE_DIGEST;
        let mut dispatches = self.work_nodes() - self.faults.missing_dispatches;
        // Inside the observed nodes: their work and barriers (not the gaps, not the replays).
        let mut in_node_ms = observed_set(mode).map(|_| 0.0);
        for &c in observed_set(mode).into_iter().flatten() {
            let barriers = self.costs.observe_barrier_ms * self.nodes_in(c) as f64;
            wall_ms += barriers;
            in_node_ms = in_node_ms.map(|t| t + self.category_ms(c) + barriers);
            if self.faults.observe_changes_digest == Some(c) {
                digest ^= 0x0B5;
            }
        }
        if let RunMode::Replay { categories, times } = mode {
            wall_ms += self.costs.replay_entry_ms;
            let k = f64::from(*times).powf(self.faults.replay_power);
            for &c in categories {
                let n = self.nodes_in(c);
                let extra = k * (self.category_ms(c) + self.costs.replay_barrier_ms * n as f64);
                wall_ms += if self.faults.replay_speeds_up == Some(c) {
                    -extra
                } else {
                    extra
                };
                dispatches += u64::from(*times) * n;
                if self.faults.replay_changes_digest == Some(c) {
                    digest ^= 0xBAD;
                }
            }
        }
        if self.faults.odd_digest_prefills.contains(&self.prefills) {
            digest ^= 0x0DD;
        }
        let mut scale = 1.0;
        if self.faults.spike_prefills.contains(&self.prefills) {
            scale *= 10.0;
        }
        if let (Some((c, _)), Some(s)) = (self.faults.slow_group, observed_set(mode)) {
            self.in_slow_group = s.len() == 1 && s.contains(&c);
        }
        if let Some((_, factor)) = self.faults.slow_group
            && self.in_slow_group
        {
            scale *= factor;
        }
        if let Some((period, factor)) = self.faults.level_switch
            && (self.prefills / period.max(1)) % 2 == 1
        {
            scale *= factor;
        }
        let n = self.faults.warming_prefills;
        if self.prefills < n {
            scale *= 1.0 + 0.5 * (n - self.prefills) as f64 / n as f64;
        }
        wall_ms *= scale;
        self.prefills += 1;
        Ok(RunOutcome {
            wall_ms,
            output_digest: digest,
            dispatches,
            in_node_ms: in_node_ms
                .filter(|_| !self.faults.no_node_time)
                .map(|t| t * scale),
        })
    }

    fn decode(&mut self, _prompt: &[u32], n_gen: usize) -> Result<RunOutcome, SubjectError> {
        self.calls.push(FakeCall::Decode(n_gen));
        Ok(RunOutcome {
            wall_ms: n_gen as f64 * self.costs.decode_ms_per_token,
            output_digest: FAKE_DIGEST,
            dispatches: n_gen as u64 * self.work_nodes(),
            in_node_ms: None,
        })
    }

    fn time_op(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError> {
        self.calls
            .push(FakeCall::TimeOp(req.node.name.clone(), req.routing));
        if let Some(rec) = req.recorded {
            // The fake's MoE ops route the whole batch.
            let t = crate::routing::table_for(
                req.routing,
                Some(rec),
                req.layers,
                self.graph.n_tokens as usize,
                rec.n_experts,
                rec.k,
                req.seed,
            )
            .map_err(|e| SubjectError::Engine {
                engine: self.graph.engine.engine.clone(),
                message: e.to_string(),
            })?;
            self.fed_tables.push((req.node.name.clone(), t));
        }
        let c = req.node.category;
        let mut ms = self.costs.node_ms.get(&c).copied().unwrap_or(0.0)
            * self.costs.standalone_ratio.get(&c).copied().unwrap_or(1.0);
        if req.routing == Routing::FirstK && matches!(c, Category::MoeGateUp | Category::MoeDown) {
            ms *= self.costs.first_k_ratio;
        }
        Ok(vec![ms; req.reps.max(1)])
    }

    fn model_routing(
        &mut self,
        _context: &[u32],
        tokens: &[u32],
    ) -> Result<Option<ModelRouting>, SubjectError> {
        if let Some(r) = &self.routing
            && r.n_tokens != tokens.len()
        {
            return Err(SubjectError::Engine {
                engine: self.graph.engine.engine.clone(),
                message: format!(
                    "fake routing is for {} tokens, not {}",
                    r.n_tokens,
                    tokens.len()
                ),
            });
        }
        Ok(self.routing.clone())
    }

    fn busy_reason(&mut self) -> Option<String> {
        self.busy_checks += 1;
        (self.busy_checks <= self.faults.busy_checks).then(|| "fake: another job".to_string())
    }
}
