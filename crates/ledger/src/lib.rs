//! tally-ledger: the measuring method, engine-agnostic.
//!
//! Engines implement [`subject::Subject`]; everything else here (graph checks, dead-work
//! analysis, standalone timing, in-graph replay, the noise gate, the ledger and its reports)
//! is written once and applied to both sides the same way.

pub mod category;
pub mod schema;
pub mod subject;

pub use category::Category;
