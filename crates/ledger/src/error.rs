//! The one error type of the ledger's protocols and checks.

use crate::subject::SubjectError;

/// Everything that can stop a protocol or a check.
///
/// A graph whose counts disagree with the architecture is an error, never a warning: the
/// protocols refuse to time a graph they cannot account for.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The engine adapter failed.
    #[error(transparent)]
    Subject(#[from] SubjectError),
    /// The graph export failed its checks (counts, indices, schema version).
    #[error("graph check failed for {engine}: {summary}")]
    GraphCheck {
        /// Engine whose export failed.
        engine: String,
        /// Every failed check, one per line.
        summary: String,
    },
    /// A graph has no non-view node: nothing to time.
    #[error("graph of {engine} has no work nodes (all {nodes} nodes are views)")]
    EmptyGraph {
        /// Engine whose export is empty.
        engine: String,
        /// Nodes in the export.
        nodes: usize,
    },
    /// `k` experts per token cannot be drawn without replacement from `n_experts`.
    #[error("routing: cannot draw {k} distinct experts per token from {n_experts} experts")]
    RoutingK {
        /// Experts per token requested.
        k: usize,
        /// Experts available.
        n_experts: usize,
    },
    /// Model routing comes from the engine running the model, not from a generator.
    #[error("routing `model` is produced by the engine itself: the ledger cannot generate it")]
    ModelRouting,
    /// A recorded routing table does not have the shape the op or the prompt needs.
    #[error("recorded routing: {what}")]
    RecordedRouting {
        /// What does not fit.
        what: String,
    },
    /// An expert id in a routing table is not a valid expert.
    #[error("expert id {id} at position {position} is out of range for {n_experts} experts")]
    ExpertOutOfRange {
        /// The offending id.
        id: u32,
        /// Its position in the token-major table.
        position: usize,
        /// Experts available.
        n_experts: usize,
    },
    /// The noise gate discarded every window it ran.
    #[error("{what}: no clean window after {discards} discards ({reasons})")]
    NoCleanWindow {
        /// What was being measured.
        what: String,
        /// Windows discarded.
        discards: usize,
        /// Distinct discard reasons, `; `-separated.
        reasons: String,
    },
    /// A subject returned a timing that is not a finite, non-negative number of ms.
    #[error("{engine}: {what} returned an invalid time {value_ms} ms")]
    BadSample {
        /// Engine that produced it.
        engine: String,
        /// The run or op that produced it.
        what: String,
        /// The value (NaN, infinite or negative).
        value_ms: f64,
    },
    /// A configuration value is out of its allowed range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A record could not be (de)serialised.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
