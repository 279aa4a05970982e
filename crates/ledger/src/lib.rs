//! tally-ledger: the measuring method, engine-agnostic.
//!
//! Engines implement [`subject::Subject`]; everything else here (graph checks, dead-work
//! analysis, standalone timing, in-graph replay, the noise gate, the ledger and its reports)
//! is written once and applied to both sides the same way. The method and the JSON documents
//! are described in `docs/ledger.md`; the JSON Schema is `docs/schema/tally-ledger.schema.json`.
//!
//! Module map, in the order a measurement runs:
//! - [`schema`], [`category`], [`subject`]: the contract with the engines.
//! - [`graph`]: counts and the architecture cross-check ([`graph::check_graph`]).
//! - [`deadwork`]: dead and partially dead nodes ([`deadwork::dead_work`]).
//! - [`routing`]: realistic / first-k routing tables and expert histograms.
//! - [`stats`], [`noise`], [`gate`]: statistics, the noise gate's rules, the window runner.
//! - [`e2e`], [`mod@opbench`], [`mod@replay`]: the three timing protocols.
//! - [`mod@measure`]: all of it for one or two engines ([`measure::measure_pair`]).
//! - [`ledger`]: the comparison ([`ledger::build_ledger`]); [`report`]: its renderings.
//! - [`docschema`]: the generated JSON Schema; [`fake`]: deterministic test subjects.

pub mod category;
pub mod deadwork;
pub mod docschema;
pub mod e2e;
pub mod error;
pub mod fake;
pub mod gate;
pub mod graph;
pub mod ledger;
pub mod machine;
pub mod measure;
pub mod noise;
pub mod opbench;
pub mod replay;
pub mod report;
pub mod rng;
pub mod routing;
pub mod schema;
pub mod stats;
pub mod subject;

pub use category::Category;
pub use deadwork::{DeadWorkReport, dead_work};
pub use error::LedgerError;
pub use graph::{GraphReport, check_graph};
pub use ledger::{Ledger, LedgerConfig, build_ledger, build_ledger_with};
pub use measure::{MeasureConfig, Measurement, measure, measure_pair};
pub use opbench::{OpbenchConfig, OpbenchReport, opbench};
pub use replay::{ReplayConfig, ReplayReport, replay, replay_pair};
pub use report::{render_json, render_markdown, render_svg, render_terminal};

#[cfg(test)]
mod roundtrip_tests;
