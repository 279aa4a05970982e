//! The one interface an engine implements to be measured.
//!
//! The ledger's protocols (standalone timing, in-graph replay, end-to-end runs, the noise gate)
//! are written once against this trait; tally's backends and the llama.cpp peer each implement it,
//! so both sides are measured by the same code.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::routing::ModelRouting;
use crate::schema::{EngineInfo, GraphExport, GraphNode, Routing};

/// A set of categories (ordered, so runs are reproducible).
pub type CategorySet = BTreeSet<Category>;

/// What is measured: one batch of `n_tokens` tokens after a context of `n_past` tokens.
///
/// A prefill from a fresh state is `(0, N)`; one decode step at depth D is `(D, 1)`. Every
/// protocol measures the batch only: before each timed run the subject restores the state the
/// context leaves (untimed), so every run of a series starts from the same state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Workload {
    /// Context tokens before the measured batch (its position).
    pub n_past: usize,
    /// Tokens of the measured batch.
    pub n_tokens: usize,
}

impl Workload {
    /// A prefill of `n_tokens` from a fresh state.
    pub fn prefill(n_tokens: usize) -> Workload {
        Workload {
            n_past: 0,
            n_tokens,
        }
    }

    /// One decode step (a one-token batch) after a context of `depth` tokens.
    pub fn step_at(depth: usize) -> Workload {
        Workload {
            n_past: depth,
            n_tokens: 1,
        }
    }

    /// A prefill from a fresh state (no context to restore).
    pub fn is_prefill(&self) -> bool {
        self.n_past == 0
    }

    /// A one-token step after a context.
    pub fn is_step(&self) -> bool {
        self.n_past > 0 && self.n_tokens == 1
    }

    /// Positions the state must hold: context plus batch.
    pub fn total(&self) -> usize {
        self.n_past.saturating_add(self.n_tokens)
    }

    /// The short name used in file names: `pp512` (prefill), `step-d512` (one decode step at
    /// depth 512), `pp4-d512` (a 4-token batch after 512 tokens).
    pub fn label(&self) -> String {
        if self.is_prefill() {
            format!("pp{}", self.n_tokens)
        } else if self.is_step() {
            format!("step-d{}", self.n_past)
        } else {
            format!("pp{}-d{}", self.n_tokens, self.n_past)
        }
    }

    /// A report's title: `pp512`, or the label with the description
    /// (`step-d512 (decode step at depth 512)`).
    pub fn heading(&self) -> String {
        if self.is_prefill() {
            self.label()
        } else {
            format!("{} ({})", self.label(), self.describe())
        }
    }

    /// What the timed run is, in a word: `prefill` or `step`.
    pub fn run_word(&self) -> &'static str {
        if self.is_step() { "step" } else { "prefill" }
    }

    /// A phrase for headlines: `prefill of 512 tokens`, `decode step at depth 512`.
    pub fn describe(&self) -> String {
        if self.is_prefill() {
            format!("prefill of {} tokens", self.n_tokens)
        } else if self.is_step() {
            format!("decode step at depth {}", self.n_past)
        } else {
            format!("{}-token batch at depth {}", self.n_tokens, self.n_past)
        }
    }
}

/// The tokens of a workload's runs: the context (restored before each run, untimed), then the
/// measured batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt<'a> {
    /// Context and batch, in order.
    pub all: &'a [u32],
    /// Context tokens (the first `n_past` of `all`).
    pub n_past: usize,
}

impl<'a> Prompt<'a> {
    /// A prompt run from a fresh state (no context).
    pub fn fresh(tokens: &'a [u32]) -> Prompt<'a> {
        Prompt {
            all: tokens,
            n_past: 0,
        }
    }

    /// The first `n_past` tokens of `all` are the context, the rest the batch.
    pub fn split(all: &'a [u32], n_past: usize) -> Prompt<'a> {
        Prompt {
            all,
            n_past: n_past.min(all.len()),
        }
    }

    /// The context restored before each run.
    pub fn context(&self) -> &'a [u32] {
        &self.all[..self.n_past]
    }

    /// The measured batch.
    pub fn batch(&self) -> &'a [u32] {
        &self.all[self.n_past..]
    }
}

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
    /// In an observe or replay run: the time spent inside the observed nodes, each from the
    /// barrier before it to the barrier after it, replays excluded (on llama.cpp's peer, the
    /// graph segment the scheduler computes up to an observed node, so it reports a time only
    /// when every work node was observed: in a run that observes some categories, the other
    /// categories' nodes are computed inside those segments). The rest of the run's
    /// wall time (graph building, scheduling, host work between nodes) is outside the nodes:
    /// the replay protocol compares what replaying adds with this, not with the wall time.
    /// None in plain runs and from engines that cannot tell.
    pub in_node_ms: Option<f64>,
}

/// Standalone-timing request for one distinct op.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTimingRequest<'a> {
    /// A representative node (all nodes with the same op key share op, shapes and dtypes).
    pub node: &'a GraphNode,
    /// Routing for MoE ops (ignored by others).
    pub routing: Routing,
    /// Under [`Routing::Model`], the model's recorded routing of the batch, from which a MoE op
    /// is fed the table [`crate::routing::table_for`] picks for `layers` and the op's token
    /// count; `None` for other ops and routings.
    pub recorded: Option<&'a ModelRouting>,
    /// The layers of the nodes this op key stands for (the pick's candidates).
    pub layers: &'a [u32],
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

    /// The real graph the engine runs for the workload's batch: `w.n_tokens` tokens at
    /// position `w.n_past` (the export's `n_tokens` and `n_past` must say so).
    fn graph(&mut self, w: Workload) -> Result<GraphExport, SubjectError>;

    /// Restores the state `context` leaves (untimed; an empty context is a fresh state), then
    /// runs `tokens` as one batch at position `context.len()`, instrumented as `mode` says.
    /// `wall_ms`, the digest and the dispatches describe that batch only. A prefill from a
    /// fresh state has an empty context.
    fn prefill(
        &mut self,
        context: &[u32],
        tokens: &[u32],
        mode: &RunMode,
    ) -> Result<RunOutcome, SubjectError>;

    /// Decodes `n_gen` tokens one at a time after a prefill of `prompt` (the prefill is not
    /// timed); `wall_ms` covers the decode steps only.
    fn decode(&mut self, prompt: &[u32], n_gen: usize) -> Result<RunOutcome, SubjectError>;

    /// Times one op alone (inputs generated, MoE routed as requested); per-call samples in ms.
    fn time_op(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError>;

    /// The routing the model itself chooses for `tokens` after `context` (every MoE layer's
    /// router output), which standalone timings under [`Routing::Model`] feed to every engine
    /// alike; `None` when this engine cannot record it. Untimed.
    fn model_routing(
        &mut self,
        context: &[u32],
        tokens: &[u32],
    ) -> Result<Option<ModelRouting>, SubjectError> {
        let _ = (context, tokens);
        Ok(None)
    }

    /// Why the machine looks busy right now, if it does (other GPU processes, clock drops).
    /// The generic CPU-load check is done by the noise gate itself.
    fn busy_reason(&mut self) -> Option<String> {
        None
    }
}
