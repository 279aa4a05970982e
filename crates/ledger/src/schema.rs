//! The versioned JSON schema every engine produces and the ledger consumes.
//!
//! This module holds the *producer-side* records (what an engine adapter emits): engine and
//! machine facts, the graph export, and the raw timing samples. Reports built from them live in
//! their own modules. Every duration carries its unit in its name (`_ms`), every size its unit
//! (`_bytes`), every rate its unit (`_gbps`, `_tflops`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;

/// Version of the JSON documents written by this crate. Bump on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Which engine, build and model a record came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineInfo {
    /// `tally` or `llama.cpp`.
    pub engine: String,
    /// Build identity: git commit (with `-dirty`) or library version.
    pub version: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// Where it ran: CPU model and thread count, or GPU name.
    pub device: String,
    /// Threads used on the CPU (None on a GPU backend).
    pub threads: Option<usize>,
    /// The backend's switches in effect, `name=value` (e.g. tally's CUDA backend:
    /// `gemm=kernels`, `decode_graph=on`), read once when it opened. Empty where it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The model file measured.
    pub model: ModelFacts,
}

/// Facts about the model file, the same for every engine that loads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelFacts {
    /// Path as given on the command line.
    pub path: String,
    /// File size.
    pub file_bytes: u64,
    /// GGUF `general.architecture`.
    pub arch: String,
    /// Transformer blocks.
    pub n_layers: u32,
    /// Vocabulary size (prompt tokens are drawn from `0..n_vocab`).
    pub n_vocab: u32,
    /// Routed experts per MoE layer.
    pub n_experts: u32,
    /// Experts each token is routed to (top-k).
    pub n_experts_used: u32,
}

/// Facts about the machine, measured once per run and stored with the results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineInfo {
    /// Host name.
    pub hostname: String,
    /// Operating system and kernel release.
    pub os: String,
    /// CPU model name.
    pub cpu_model: String,
    /// Hardware threads the OS reports.
    pub cpu_threads: usize,
    /// GPU name when a GPU backend ran.
    pub gpu: Option<GpuInfo>,
    /// Measured memory bandwidth ceiling (bytes read + written per second / 1e9).
    pub peak_gbps: Option<f64>,
    /// Measured matrix-unit ceiling in the precision the engine's big kernels use.
    pub peak_tflops: Option<f64>,
    /// How the peaks were measured (e.g. "device copy 8 GiB, median of 20").
    pub peak_method: Option<String>,
    /// ISO-8601 UTC timestamp of the measurement.
    pub measured_at: String,
}

/// Facts about the GPU, from a device query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuInfo {
    /// Device name.
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache size.
    pub l2_bytes: u64,
    /// Device memory size.
    pub memory_bytes: u64,
    /// `major.minor`.
    pub compute_capability: String,
    /// Driver version.
    pub driver: String,
}

/// A tensor as seen by a graph node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TensorDesc {
    /// Role name (`blk.7.attn_q.weight`, `blk.7.attn_norm`).
    pub name: String,
    /// Logical shape, outermost dimension first (`[tokens, features]`).
    pub shape: Vec<u64>,
    /// Element type as the engine stores it (`f32`, `q4_k`, ...).
    pub dtype: String,
}

/// How the rows (tokens) of one node input relate to the rows of the node's output; drives the
/// engine-agnostic dead-work analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowDep {
    /// Output row i needs input row i only (projections, norms, element-wise, MoE per token).
    /// Also used for row selections: an output of r rows needs r input rows.
    Same,
    /// Any needed output row needs every row of this input (attention's K/V, conv, recurrence).
    All,
}

/// One input of a node: the tensor, which node produced it (None for weights and graph inputs),
/// and how its rows are needed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeInput {
    /// The tensor read.
    pub tensor: TensorDesc,
    /// Index (into `GraphExport::nodes`) of the node that produced this tensor.
    pub src: Option<u32>,
    /// How many of this input's rows each needed output row needs.
    pub rows: RowDep,
}

/// One node of an engine's real compute graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphNode {
    /// Position in execution order (equals the node's index in `GraphExport::nodes`).
    pub index: u32,
    /// Stable human name (`blk.7.attn_q`, `blk.7.moe_gate_up`).
    pub name: String,
    /// The engine's op name (`matmul`, `MUL_MAT_ID`, ...).
    pub op: String,
    /// The ledger row this node's time goes to.
    pub category: Category,
    /// Layer index for per-layer nodes.
    pub layer: Option<u32>,
    /// Inputs in the op's argument order.
    pub inputs: Vec<NodeInput>,
    /// The tensor written.
    pub output: TensorDesc,
    /// Token rows this node computes (None when the output has no token axis).
    pub rows: Option<u64>,
    /// A view-only node (reshape, view, permute without copy): counted, does no work.
    pub is_view: bool,
    /// The node writes persistent state (KV cache, conv state, recurrent state).
    pub persistent: bool,
    /// The node's output is a final output of the graph (the logits).
    pub is_output: bool,
    /// Bytes the node must read (each input once: activations plus weights).
    pub bytes_read: u64,
    /// Bytes the node must write.
    pub bytes_written: u64,
    /// Of `bytes_read`, the bytes of model weights.
    pub weight_bytes: u64,
    /// Number of weight elements those bytes hold (bits per weight = 8 * bytes / params).
    pub weight_params: u64,
    /// Floating-point operations (a multiply-add counts 2).
    pub flops: u64,
}

/// A count the graph must have, derived from the model's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExpectedCount {
    /// What is counted, in words ("routed-expert gate/up matmuls").
    pub what: String,
    /// Non-view nodes of this category...
    pub category: Option<Category>,
    /// ...and/or with this op name.
    pub op: Option<String>,
    /// The count the architecture implies.
    pub expected: u64,
    /// How the number follows from the config ("40 layers x 2 (gate, up)").
    pub derivation: String,
}

/// The real compute graph of one engine for one prompt length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphExport {
    /// [`SCHEMA_VERSION`] of the producer.
    pub schema: u32,
    /// Who exported it.
    pub engine: EngineInfo,
    /// Prompt tokens processed by this graph.
    pub n_tokens: u64,
    /// Tokens already in the state before this graph (0 for a prefill).
    pub n_past: u64,
    /// Nodes in execution order.
    pub nodes: Vec<GraphNode>,
    /// Counts derived from the architecture, checked by [`crate::graph::check_graph`].
    pub expected: Vec<ExpectedCount>,
    /// Free-form notes from the exporter (what the observation split does, fused ops, ...).
    pub notes: Vec<String>,
}

/// How MoE inputs are routed when an op is timed standalone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// Each token draws its top-k from all experts (distinct), as a trained model routes.
    Realistic,
    /// Every token routed to experts 0..k-1 (the common benchmark mistake: weights stay in cache).
    FirstK,
    /// The routing the model itself produced for a prompt.
    Model,
}

impl Routing {
    /// Stable machine name (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Routing::Realistic => "realistic",
            Routing::FirstK => "first-k",
            Routing::Model => "model",
        }
    }
}
