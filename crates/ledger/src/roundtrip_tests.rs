//! Every record type survives serialize -> deserialize unchanged, and every type named in the
//! JSON Schema is exercised here.

use std::collections::BTreeSet;
use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::category::Category;
use crate::deadwork::*;
use crate::docschema::RECORD_TYPES;
use crate::e2e::*;
use crate::fake::{FakeCosts, FakeSubject, ToyGraph, toy_graph};
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

fn rt<T: Serialize + DeserializeOwned + PartialEq + Debug>(v: &T) {
    let json = serde_json::to_string(v).unwrap();
    let back: T = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, v, "{json}");
}

macro_rules! check {
    ($seen:ident; $($v:expr => $t:ty),* $(,)?) => {
        $( rt::<$t>(&$v); $seen.insert(stringify!($t)); )*
    };
}

fn measurements() -> (Measurement, Measurement, MeasureConfig) {
    let mut costs = FakeCosts::default();
    for (c, ms) in [
        (Category::DenseProj, 0.5),
        (Category::MoeGateUp, 2.0),
        (Category::MoeDown, 1.0),
        (Category::Layout, 0.2),
    ] {
        costs.node_ms.insert(c, ms);
    }
    let mut a = FakeSubject::new(
        toy_graph(&ToyGraph {
            dead_node: true,
            ..ToyGraph::default()
        }),
        costs.clone(),
    );
    a.faults.busy_checks = 1;
    a.faults.spike_prefills = vec![12]; // the plain run of the first gated replay window
    a.faults.missing_dispatches = 1;
    let mut b = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "peer".into(),
            ..ToyGraph::default()
        }),
        costs,
    );
    b.faults.replay_power = 2.0;
    b.faults.replay_changes_digest = Some(Category::Layout);
    let mut cfg = MeasureConfig::new(
        8,
        MachineInfo {
            hostname: "host".into(),
            os: "Linux 6".into(),
            cpu_model: "cpu".into(),
            cpu_threads: 16,
            gpu: Some(GpuInfo {
                name: "H200".into(),
                sm_count: 132,
                l2_bytes: 60 << 20,
                memory_bytes: 141 << 30,
                compute_capability: "9.0".into(),
                driver: "570".into(),
            }),
            peak_gbps: Some(4200.0),
            peak_tflops: Some(744.0),
            peak_method: Some("device copy".into()),
            measured_at: "2026-01-01T00:00:00Z".into(),
        },
    );
    cfg.noise.probe = ProbeChoice::Off;
    cfg.n_gen = 2;
    cfg.include_graph = true;
    if let Some(o) = cfg.opbench.as_mut() {
        o.first_k = true;
    }
    let (ma, mb) = measure_pair(&mut a, &mut b, &cfg).unwrap();
    (ma, mb, cfg)
}

#[test]
fn every_record_round_trips() {
    let (ma, mb, cfg) = measurements();
    let ledger = build_ledger(&ma, &mb);
    let g = ma.graph_export.clone().unwrap();
    let ob = ma.opbench.clone().unwrap();
    let rp = mb.replay.clone().unwrap();
    let ra = ma.replay.clone().unwrap();
    let row = ledger.rows[0].clone();
    let win = ma
        .e2e
        .prefill
        .group
        .windows
        .iter()
        .find(|w| !w.reasons.is_empty())
        .unwrap()
        .clone();
    let load = WindowLoad {
        loadavg_1m_before: 1.0,
        loadavg_1m_after: 2.0,
        machine_busy_cores: Some(3.0),
        other_busy_cores: Some(2.0),
        subject_threads: 1,
        n_cpus: 4,
    };
    let reasons = vec![
        DiscardReason::CpuBusy {
            other_busy_cores: 2.0,
            limit_cores: 0.5,
        },
        DiscardReason::LoadAverage {
            loadavg_1m: 3.0,
            subject_threads: 1,
            limit_excess: 1.5,
        },
        DiscardReason::SubjectBusy {
            engine: "e".into(),
            reason: "r".into(),
        },
        DiscardReason::Outlier {
            series: "s".into(),
            value_ms: 9.0,
            median_ms: 1.0,
            threshold_ms: 0.1,
        },
        DiscardReason::TooManyOutliers {
            outliers: 3,
            samples: 10,
            limit_ratio: 0.2,
        },
    ];
    let issues = vec![
        GraphIssue::SchemaVersion {
            found: 2,
            expected: 1,
        },
        GraphIssue::IndexMismatch {
            position: 1,
            index: 2,
            name: "n".into(),
        },
        GraphIssue::SrcNotBackwards {
            node: 1,
            name: "n".into(),
            input: 0,
            src: 1,
        },
        GraphIssue::NoMatcher { what: "w".into() },
        GraphIssue::CountMismatch {
            what: "w".into(),
            expected: 80,
            found: 40,
            derivation: "40 layers x 2".into(),
        },
    ];
    let problems = vec![
        ReplayProblem::AllAtOnce {
            increment_ms: 1.0,
            baseline_ms: 2.0,
            node_time: true,
            tolerance_ratio: 0.1,
            same_run: true,
        },
        ReplayProblem::SumOfParts {
            sum_ms: 1.0,
            baseline_ms: 2.0,
            node_time: false,
            tolerance_ratio: 0.1,
        },
        ReplayProblem::NonDeterministic {
            distinct_digests: 2,
        },
        ReplayProblem::NegativeIncrement {
            category: Category::Norm,
            increment_ms: -1.0,
        },
        ReplayProblem::GateExhausted { what: "w".into() },
    ];
    let unsupported = UnsupportedOp {
        key: ob.ops[0].key.clone(),
        nodes: 1,
        by_category: ob.ops[0].by_category.clone(),
        reason: "no standalone path".into(),
    };
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    check!(seen;
        ma.engine => EngineInfo,
        ma.engine.model => ModelFacts,
        ma.machine => MachineInfo,
        ma.machine.gpu.clone().unwrap() => GpuInfo,
        g.nodes[1].output => TensorDesc,
        RowDep::All => RowDep,
        g.nodes[1].inputs[0] => NodeInput,
        g.nodes[1] => GraphNode,
        g.expected[0] => ExpectedCount,
        g => GraphExport,
        Routing::FirstK => Routing,
        Category::MoeDown => Category,
        RunMode::Replay { categories: [Category::Norm].into_iter().collect(), times: 4 } => RunMode,
        ma.graph => GraphReport,
        ma.graph.categories[0] => CategoryCount,
        ma.graph.ops[0] => OpCount,
        ma.graph.expected[0] => ExpectedCheck,
        issues => Vec<GraphIssue>,
        ma.dead_work => DeadWorkReport,
        ma.dead_work.dead[0] => WastedNode,
        ma.dead_work.by_category[0] => CategoryWaste,
        cfg.noise => NoiseConfig,
        ProbeChoice::Proc => ProbeChoice,
        Interleave::Forward => Interleave,
        load => WindowLoad,
        reasons => Vec<DiscardReason>,
        Verdict::NoVerdict => Verdict,
        Figure { value_ms: 1.5, spread_ms: 0.25, samples: 5 } => Figure,
        row.comparison => Comparison,
        Action::Decode { n_gen: 2 } => Action,
        ra.all_group.series[0] => SeriesSpec,
        win.runs[0] => RunSample,
        WindowStatus::Warmup => WindowStatus,
        win => WindowRecord,
        ra.all_group => GroupRecord,
        ob.ops[0].samples.attempts[0] => OpAttempt,
        ob.ops[0].samples => OpSampleRecord,
        ob.ops[0].stats => Stats,
        rp.validations.linearity.fit.clone().unwrap() => LinearFit,
        ob.routing_tables[0].histogram => ExpertHistogram,
        ob.routing_tables[1] => RoutingSummary,
        cfg.opbench.clone().unwrap() => OpbenchConfig,
        ob.ops[0].key.output => ShapeDtype,
        ob.ops[0].key => OpKey,
        ob.ops[0].by_category[0] => CategoryNodes,
        ob.first_k_ops[0] => OpTiming,
        unsupported => UnsupportedOp,
        ob.categories[0].top_op.clone().unwrap() => TopOp,
        ob.categories[0] => CategoryStandalone,
        ob.coverage.clone().unwrap() => Coverage,
        ob => OpbenchReport,
        cfg.replay.clone().unwrap() => ReplayConfig,
        rp.problems => Vec<ReplayProblem>,
        problems => Vec<ReplayProblem>,
        rp.validations.all_at_once => ToleranceCheck,
        rp.validations.linearity => LinearityCheck,
        rp.validations.digest => DigestCheck,
        rp.validations => Validations,
        rp.observation => ObservationCost,
        rp.categories[0] => CategoryReplay,
        rp => ReplayReport,
        E2eConfig { n_tokens: 8, n_past: 0, n_gen: 2, time_prefill: true, seed: 1, noise: cfg.noise.clone() } => E2eConfig,
        ma.e2e.prefill => RunSeries,
        ma.e2e.decode.clone().unwrap() => DecodeReport,
        ma.e2e => E2eReport,
        cfg => MeasureConfig,
        ma.probe.mismatches[0] => ProbeMismatch,
        ma.probe => ProbeCheck,
        ma => Measurement,
        mb => Measurement,
        ledger.config => LedgerConfig,
        FigureSource::Missing => FigureSource,
        RowMethod::Mixed => RowMethod,
        RowVerdict::Attack => RowVerdict,
        row.a.roofline => Roofline,
        row.a => Side,
        ByteVerdict::FewerBytesButSlower => ByteVerdict,
        row.byte_check => ByteCheck,
        KernelVerdict::Even => KernelVerdict,
        row.kernel_check => KernelCheck,
        row => LedgerRow,
        ledger.a => SideSummary,
        ledger.totals => Totals,
        ledger => Ledger,
    );
    // The populated fixture really holds the interesting cases.
    assert!(!ma.probe.complete && ma.dead_work.dead.len() == 1);
    assert!(ledger.a.gate_discards >= 2 && !rp.trusted && rp.problems.len() >= 2);
    assert!(!ledger.warnings.is_empty());
    let seen: BTreeSet<&str> = seen
        .into_iter()
        .map(|t| t.trim_start_matches("Vec<").trim_end_matches('>'))
        .collect();
    let named: BTreeSet<&str> = RECORD_TYPES.iter().copied().collect();
    assert_eq!(
        named.difference(&seen).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "record types in the schema without a round-trip"
    );
}
