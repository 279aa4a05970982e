//! The one interface an engine implements to be measured.
//!
//! The ledger's protocols (standalone timing, in-graph replay, end-to-end runs, the noise gate)
//! are written once against this trait; tally's backends and the llama.cpp peer each implement it,
//! so both sides are measured by the same code.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::schema::{EngineInfo, GraphExport, GraphNode, Routing};

/// A set of categories (ordered, so runs are reproducible).
pub type CategorySet = BTreeSet<Category>;

/// How a prefill run is instrumented.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    /// No instrumentation: the engine's normal fast path (CUDA graph, fusions).
    Plain,
    /// Barriers around every node of these categories, nothing re-run. The baseline for replay.
    Observe(CategorySet),
    /// Like `Observe`, and every node of these categories is dispatched `times` extra times in
    /// place, writing to scratch, with a barrier before and after each extra dispatch.
    Replay {
        /// Categories whose nodes are re-dispatched.
        categories: CategorySet,
        /// Extra dispatches of each node (the protocol uses 1, 2 and 4).
        times: u32,
    },
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Wall time of the run, device work included (the engine synchronises before returning).
    pub wall_ms: f64,
    /// Hash of the run's real outputs (the logits' bytes): replay must not change it.
    pub output_digest: u64,
    /// Dispatches that went through the engine's executor (probe completeness).
    pub dispatches: u64,
}

/// Standalone-timing request for one distinct op.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTimingRequest<'a> {
    /// A representative node (all nodes with the same op key share op, shapes and dtypes).
    pub node: &'a GraphNode,
    /// Routing for MoE ops (ignored by others).
    pub routing: Routing,
    /// Seed for generated inputs and routing.
    pub seed: u64,
    /// Untimed calls before the timed ones.
    pub warmup: usize,
    /// Timed calls; `time_op` returns one sample per call.
    pub reps: usize,
}

/// Errors an engine adapter reports to the protocols.
#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    /// Any failure of the engine.
    #[error("{engine}: {message}")]
    Engine {
        /// Engine name.
        engine: String,
        /// What went wrong.
        message: String,
    },
    /// The engine cannot time this op alone.
    #[error("{engine} cannot time op `{op}` standalone: {reason}")]
    Unsupported {
        /// Engine name.
        engine: String,
        /// The op.
        op: String,
        /// Why.
        reason: String,
    },
}

/// An engine under measurement.
pub trait Subject {
    /// Engine, build, backend and model facts.
    fn info(&self) -> EngineInfo;

    /// The real graph the engine runs for a prompt of `n_tokens`.
    fn graph(&mut self, n_tokens: usize) -> Result<GraphExport, SubjectError>;

    /// One prefill of `tokens` from a fresh state, instrumented as `mode` says.
    fn prefill(&mut self, tokens: &[u32], mode: &RunMode) -> Result<RunOutcome, SubjectError>;

    /// Decodes `n_gen` tokens one at a time after a prefill of `prompt` (the prefill is not
    /// timed); `wall_ms` covers the decode steps only.
    fn decode(&mut self, prompt: &[u32], n_gen: usize) -> Result<RunOutcome, SubjectError>;

    /// Times one op alone (inputs generated, MoE routed as requested); per-call samples in ms.
    fn time_op(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError>;

    /// Why the machine looks busy right now, if it does (other GPU processes, clock drops).
    /// The generic CPU-load check is done by the noise gate itself.
    fn busy_reason(&mut self) -> Option<String> {
        None
    }
}
