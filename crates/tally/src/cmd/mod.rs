pub mod bench;
pub mod chat;
pub mod check;
pub mod checks;
pub mod common;
pub mod generate;
pub mod graph;
pub mod info;
pub mod kernels;
pub mod ledger;
pub mod machine;
pub mod measure;
pub mod peer;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;

/// A bad command-line value that clap cannot catch (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// The command measured, wrote its report, and the report says "no verdict": a validation failed
/// or the noise gate ran out of retries (exit code 3, [`crate::exit::NO_VERDICT`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoVerdict(pub String);

/// Output format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text for a terminal.
    Text,
    /// JSON for machines.
    Json,
    /// Markdown tables.
    Md,
}
