//! The JSON Schema of every document and record this crate writes, generated from the types.
//!
//! The committed copy lives at `docs/schema/tally-ledger.schema.json`; a test fails when it
//! differs from what the types generate. Regenerate with
//! `TALLY_BLESS=1 cargo test -p tally-ledger docschema`.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::schema::SCHEMA_VERSION;

/// Path of the committed schema, relative to the workspace root.
pub const SCHEMA_PATH: &str = "docs/schema/tally-ledger.schema.json";

macro_rules! records {
    ($($t:ty),* $(,)?) => {
        /// Names of every record type in the schema's `$defs`.
        pub const RECORD_TYPES: &[&str] = &[$(stringify!($t)),*];

        fn add_all(generator: &mut schemars::SchemaGenerator) {
            $( let _ = generator.subschema_for::<$t>(); )*
        }
    };
}

use crate::category::Category;
use crate::deadwork::*;
use crate::e2e::*;
use crate::gate::*;
use crate::graph::*;
use crate::ledger::*;
use crate::measure::*;
use crate::noise::*;
use crate::opbench::*;
use crate::replay::*;
use crate::routing::*;
use crate::schema::*;
use crate::stats::*;
use crate::subject::RunMode;

records!(
    // Producer side (engine adapters).
    EngineInfo,
    ModelFacts,
    MachineInfo,
    GpuInfo,
    TensorDesc,
    RowDep,
    NodeInput,
    GraphNode,
    ExpectedCount,
    GraphExport,
    Routing,
    Category,
    RunMode,
    // Graph checks and dead work.
    GraphReport,
    CategoryCount,
    OpCount,
    ExpectedCheck,
    GraphIssue,
    DeadWorkReport,
    WastedNode,
    CategoryWaste,
    // Noise gate and raw samples.
    NoiseConfig,
    ProbeChoice,
    Interleave,
    WindowLoad,
    DiscardReason,
    Verdict,
    Figure,
    Comparison,
    Action,
    SeriesSpec,
    RunSample,
    WindowStatus,
    WindowRecord,
    GroupRecord,
    OpAttempt,
    OpSampleRecord,
    Stats,
    LinearFit,
    // Routing.
    ExpertHistogram,
    RoutingSummary,
    // Standalone timing.
    OpbenchConfig,
    ShapeDtype,
    OpKey,
    CategoryNodes,
    OpTiming,
    UnsupportedOp,
    TopOp,
    CategoryStandalone,
    Coverage,
    OpbenchReport,
    // In-graph replay.
    ReplayConfig,
    ReplayProblem,
    ToleranceCheck,
    LinearityCheck,
    DigestCheck,
    Validations,
    ObservationCost,
    CategoryReplay,
    ReplayReport,
    // End-to-end and the measurement bundle.
    E2eConfig,
    RunSeries,
    DecodeReport,
    E2eReport,
    MeasureConfig,
    ProbeMismatch,
    ProbeCheck,
    Measurement,
    // The ledger.
    LedgerConfig,
    FigureSource,
    RowMethod,
    RowVerdict,
    Roofline,
    Side,
    ByteVerdict,
    ByteCheck,
    KernelVerdict,
    KernelCheck,
    LedgerRow,
    SideSummary,
    Totals,
    Ledger,
);

/// The schema document: the three top-level documents (`GraphExport`, `Measurement`,
/// `Ledger`) as `anyOf`, every record under `$defs`.
pub fn json_schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    add_all(&mut generator);
    let defs = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tally ledger documents",
        "description": "Documents written by tally-ledger: an engine's graph export (GraphExport), \
    one engine's full measurement (Measurement) and the comparison of two (Ledger). Every document \
    carries `schema`, the format version. See docs/ledger.md.",
        "x-tally-schema-version": SCHEMA_VERSION,
        "anyOf": [
            { "$ref": "#/$defs/GraphExport" },
            { "$ref": "#/$defs/Measurement" },
            { "$ref": "#/$defs/Ledger" }
        ],
        "$defs": defs,
    })
}

/// The schema as the committed file's text (pretty JSON, trailing newline).
pub fn json_schema_text() -> String {
    let mut s = serde_json::to_string_pretty(&json_schema()).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(SCHEMA_PATH)
    }

    #[test]
    fn committed_schema_matches_the_types() {
        let path = committed_path();
        if std::env::var_os("TALLY_BLESS").is_some() {
            std::fs::write(&path, json_schema_text()).unwrap();
        }
        // Compared as JSON values: key order and whitespace do not matter (serde_json's map
        // order depends on features other crates may enable).
        let committed: Option<Value> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        assert!(
            committed.as_ref() == Some(&json_schema()),
            "{} is stale: run `TALLY_BLESS=1 cargo test -p tally-ledger docschema` and commit it",
            SCHEMA_PATH
        );
    }

    #[test]
    fn committed_schema_is_json_and_names_every_record() {
        let Ok(text) = std::fs::read_to_string(committed_path()) else {
            panic!(
                "{SCHEMA_PATH} is missing: run `TALLY_BLESS=1 cargo test -p tally-ledger docschema`"
            );
        };
        let v: Value = serde_json::from_str(&text).expect("valid JSON");
        let defs = v["$defs"].as_object().expect("$defs");
        for name in RECORD_TYPES {
            assert!(defs.contains_key(*name), "{name} missing from $defs");
        }
        assert_eq!(v["x-tally-schema-version"], SCHEMA_VERSION);
        assert_eq!(v["anyOf"].as_array().map(Vec::len), Some(3));
        // Every $ref points at a definition that exists.
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&v, &mut all);
        for r in all {
            let name = r.strip_prefix("#/$defs/").expect("local ref");
            assert!(defs.contains_key(name), "dangling $ref {r}");
        }
    }
}
