//! tally-engine: the executor loop and the backends that run a plan.
//!
//! - [`exec`]: the one loop every dispatch passes through, and the hooks (instrumentation for
//!   replay, probes, captures) that attach to it;
//! - [`backend`]: the narrow trait a backend implements;
//! - [`cpu`]: the reference backend (f32, multi-threaded);
//! - [`session`]: prefill and decode of a sequence on a backend, with plans cached per shape;
//! - [`sample`]: the sampling specification (CPU reference) every backend follows;
//! - [`generate`]: prompt in, streamed tokens out, with stop rules, timings and the thread-safe
//!   [`generate::Engine`] handle; [`prefix`]: the LRU cache of saved sequence states.

pub mod backend;
pub mod cpu;
pub mod cuda;
pub mod exec;
pub mod finite;
pub mod generate;
pub mod peaks;
pub mod prefix;
pub mod sample;
pub mod session;
pub mod spec;
pub mod subject;

pub use backend::{Backend, GraphCount, StateExtent, Target};
pub use session::{DEFAULT_UBATCH, Session};

/// Errors of the engine. Input-dependent failures (token ids, lengths) have their own variants
/// so the CLI can report them plainly.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] tally_model::ModelError),
    #[error(transparent)]
    Gguf(#[from] tally_gguf::GgufError),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenId { id: u32, vocab: usize },
    #[error("expert id {id} is outside the {experts} experts")]
    ExpertId { id: i32, experts: usize },
    #[error("prompt of {tokens} tokens is longer than supported: {max} positions ({why})")]
    TooLong {
        tokens: usize,
        max: usize,
        why: &'static str,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error("CUDA: {0}")]
    Cuda(String),
    #[error("out of GPU memory allocating {bytes} bytes for {what} ({free} of {total} bytes free)")]
    OutOfMemory {
        what: String,
        bytes: usize,
        free: usize,
        total: usize,
    },
    #[error("in node {node}: {source}")]
    InNode {
        node: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// Attaches the name of the node that failed.
    pub fn in_node(self, node: &str) -> EngineError {
        match self {
            EngineError::InNode { .. } => self,
            other => EngineError::InNode {
                node: node.to_string(),
                source: Box::new(other),
            },
        }
    }
}
