//! One engine's full measurement (graph, dead work, end-to-end, standalone, in-graph replay,
//! probe completeness) bundled as a [`Measurement`], for one subject or two interleaved.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::deadwork::{DeadWorkReport, dead_work};
use crate::e2e::{E2eConfig, E2eReport, e2e_many, measured_prompt};
use crate::error::LedgerError;
use crate::gate::{Action, GroupRecord};
use crate::graph::{GraphReport, check_graph};
use crate::noise::NoiseConfig;
use crate::opbench::{OpbenchConfig, OpbenchReport, opbench};
use crate::replay::{ReplayConfig, ReplayReport, replay_many};
use crate::routing::{ModelRouting, RoutingAgreement, agreement};
use crate::schema::{EngineInfo, GraphExport, MachineInfo, Routing, SCHEMA_VERSION};
use crate::subject::{RunMode, Subject, Workload};

/// What [`measure`] runs. The sub-configurations' `seed` and `noise` are replaced by the ones
/// here, so every protocol sees the same prompt and the same gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasureConfig {
    /// Tokens of the measured batch (the prompt of a prefill; 1 for a decode step).
    pub n_tokens: usize,
    /// Context tokens before the measured batch, restored untimed before every run (0: a
    /// prefill from a fresh state; D: the batch runs at depth D).
    #[serde(default)]
    pub n_past: usize,
    /// Decode tokens (0: no decode runs).
    pub n_gen: usize,
    /// Seed of the prompt, routing tables and generated inputs.
    pub seed: u64,
    /// Noise-gate rules for every protocol.
    pub noise: NoiseConfig,
    /// Standalone timing (None: skipped).
    pub opbench: Option<OpbenchConfig>,
    /// In-graph replay (None: skipped).
    pub replay: Option<ReplayConfig>,
    /// Facts of the machine (peaks included) stored with the results.
    pub machine: MachineInfo,
    /// Store the full graph export in the measurement (large), not only its report.
    pub include_graph: bool,
}

impl MeasureConfig {
    /// Every protocol with default settings for a prompt of `n_tokens`.
    pub fn new(n_tokens: usize, machine: MachineInfo) -> MeasureConfig {
        MeasureConfig::for_workload(Workload::prefill(n_tokens), machine)
    }

    /// Every protocol with default settings for workload `w` (e.g. [`Workload::step_at`]).
    pub fn for_workload(w: Workload, machine: MachineInfo) -> MeasureConfig {
        MeasureConfig {
            n_tokens: w.n_tokens,
            n_past: w.n_past,
            n_gen: 0,
            seed: 0x5EED,
            noise: NoiseConfig::default(),
            opbench: Some(OpbenchConfig::default()),
            replay: Some(ReplayConfig::default()),
            machine,
            include_graph: false,
        }
    }

    /// The measured workload.
    pub fn workload(&self) -> Workload {
        Workload {
            n_past: self.n_past,
            n_tokens: self.n_tokens,
        }
    }
}

/// A run whose dispatch count differs from the graph's work nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeMismatch {
    /// Group and series of the run.
    pub series: String,
    /// Dispatches it reported.
    pub dispatches: u64,
}

/// Probe completeness: every plain or observe run must dispatch exactly the graph's work nodes
/// (replay runs dispatch more by design and are not checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeCheck {
    /// Non-view nodes of the graph.
    pub work_nodes: u64,
    /// Runs checked.
    pub runs_checked: u64,
    /// Runs whose count differed.
    pub mismatched_runs: u64,
    /// Distinct (series, count) mismatches.
    pub mismatches: Vec<ProbeMismatch>,
    /// No run mismatched.
    pub complete: bool,
}

/// Checks every plain/observe run of `groups` against `work_nodes`.
pub fn probe_check<'a>(
    work_nodes: u64,
    groups: impl IntoIterator<Item = &'a GroupRecord>,
) -> ProbeCheck {
    let mut check = ProbeCheck {
        work_nodes,
        runs_checked: 0,
        mismatched_runs: 0,
        mismatches: Vec::new(),
        complete: true,
    };
    for g in groups {
        for (s, spec) in g.series.iter().enumerate() {
            let checked = matches!(
                spec.action,
                Action::Prefill {
                    mode: RunMode::Plain | RunMode::Observe(_)
                }
            );
            if !checked {
                continue;
            }
            for run in g.windows.iter().filter_map(|w| w.runs.get(s)) {
                check.runs_checked += 1;
                if run.dispatches != work_nodes {
                    check.mismatched_runs += 1;
                    let m = ProbeMismatch {
                        series: format!("{}: {}", g.what, spec.label),
                        dispatches: run.dispatches,
                    };
                    if !check.mismatches.contains(&m) {
                        check.mismatches.push(m);
                    }
                }
            }
        }
    }
    check.complete = check.mismatched_runs == 0;
    check
}

/// One engine's full results for one model and prompt length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Measurement {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Engine, build, backend, model.
    pub engine: EngineInfo,
    /// Machine facts and measured peaks.
    pub machine: MachineInfo,
    /// Tokens of the measured batch (the prompt of a prefill).
    pub n_tokens: u64,
    /// Context tokens before the measured batch (0: a prefill from a fresh state; D: a batch,
    /// e.g. one decode step, at depth D). Files written before the field read as 0.
    #[serde(default)]
    pub n_past: u64,
    /// Seed used.
    pub seed: u64,
    /// Graph counts and checks.
    pub graph: GraphReport,
    /// The full export, when asked for.
    pub graph_export: Option<GraphExport>,
    /// Dead and partially dead work.
    pub dead_work: DeadWorkReport,
    /// End-to-end runs.
    pub e2e: E2eReport,
    /// Standalone timing.
    pub opbench: Option<OpbenchReport>,
    /// In-graph replay.
    pub replay: Option<ReplayReport>,
    /// Dispatches vs graph nodes.
    pub probe: ProbeCheck,
    /// The noise gate's settings the timings were taken under (absent in older files).
    #[serde(default)]
    pub noise: Option<NoiseConfig>,
}

/// Measures one subject with every protocol.
pub fn measure(subject: &mut dyn Subject, cfg: &MeasureConfig) -> Result<Measurement, LedgerError> {
    let mut v = measure_many(&mut [subject], cfg)?;
    Ok(v.remove(0))
}

/// Measures two subjects; end-to-end and replay windows are interleaved (A B A B), standalone
/// timings run one subject after the other.
pub fn measure_pair(
    a: &mut dyn Subject,
    b: &mut dyn Subject,
    cfg: &MeasureConfig,
) -> Result<(Measurement, Measurement), LedgerError> {
    let mut v = measure_many(&mut [a, b], cfg)?;
    let mb = v.remove(1);
    Ok((v.remove(0), mb))
}

/// Measures any number of subjects the same way.
pub fn measure_many(
    subjects: &mut [&mut dyn Subject],
    cfg: &MeasureConfig,
) -> Result<Vec<Measurement>, LedgerError> {
    cfg.noise.validate()?;
    let w = cfg.workload();
    if w.n_tokens == 0 {
        return Err(LedgerError::Config(
            "measure: the measured batch needs at least 1 token".into(),
        ));
    }
    let mut graphs = Vec::new();
    for s in subjects.iter_mut() {
        let g = s.graph(w)?;
        if g.n_tokens != cfg.n_tokens as u64 {
            return Err(LedgerError::Config(format!(
                "{}: asked for a graph of {} tokens, got one of {}",
                g.engine.engine, cfg.n_tokens, g.n_tokens
            )));
        }
        if g.n_past != cfg.n_past as u64 {
            return Err(LedgerError::Config(format!(
                "{}: asked for a graph at position {}, got one at {}",
                g.engine.engine, cfg.n_past, g.n_past
            )));
        }
        let report = check_graph(&g).into_result()?;
        graphs.push((g, report));
    }
    let e2e_cfg = E2eConfig {
        n_tokens: cfg.n_tokens,
        n_past: cfg.n_past,
        n_gen: cfg.n_gen,
        time_prefill: true,
        seed: cfg.seed,
        noise: cfg.noise.clone(),
    };
    let e2es = e2e_many(subjects, &e2e_cfg)?;
    let (recorded, agreement) = match &cfg.opbench {
        Some(o) if o.routing == Routing::Model => {
            let (r, a) = record_routing(subjects, w, cfg.seed)?;
            (Some(r), a)
        }
        _ => (None, Vec::new()),
    };
    let mut opbenches = Vec::new();
    for ((s, (g, _)), e) in subjects.iter_mut().zip(&graphs).zip(&e2es) {
        let report = match &cfg.opbench {
            Some(o) => {
                let o = OpbenchConfig {
                    seed: cfg.seed,
                    noise: cfg.noise.clone(),
                    ..o.clone()
                };
                let mut r = opbench(&mut **s, g, &o, recorded.as_ref())?;
                r.routing_agreement = agreement.clone();
                r.set_coverage(e.prefill.stats.median_ms);
                Some(r)
            }
            None => None,
        };
        opbenches.push(report);
    }
    let replays: Vec<Option<ReplayReport>> = match &cfg.replay {
        Some(r) => {
            let r = ReplayConfig {
                seed: cfg.seed,
                noise: cfg.noise.clone(),
                ..r.clone()
            };
            let refs: Vec<&GraphExport> = graphs.iter().map(|(g, _)| g).collect();
            replay_many(subjects, &refs, &r)?
                .into_iter()
                .map(Some)
                .collect()
        }
        None => vec![None; subjects.len()],
    };
    let mut out = Vec::new();
    for (((s, (g, report)), e2e), (opbench, replay)) in subjects
        .iter()
        .zip(graphs)
        .zip(e2es)
        .zip(opbenches.into_iter().zip(replays))
    {
        let mut groups: Vec<&GroupRecord> = vec![&e2e.prefill.group];
        if let Some(r) = &replay {
            groups.push(&r.all_group);
            groups.push(&r.linearity_group);
            groups.extend(r.categories.iter().map(|c| &c.group));
        }
        let probe = probe_check(report.work_nodes, groups);
        out.push(Measurement {
            schema: SCHEMA_VERSION,
            engine: s.info(),
            machine: cfg.machine.clone(),
            n_tokens: cfg.n_tokens as u64,
            n_past: cfg.n_past as u64,
            seed: cfg.seed,
            dead_work: dead_work(&g),
            graph: report,
            graph_export: cfg.include_graph.then_some(g),
            e2e,
            opbench,
            replay,
            probe,
            noise: Some(cfg.noise.clone()),
        });
    }
    Ok(out)
}

/// The model's routing of the measured batch (the prompt every protocol runs), from the first
/// subject that can record it: one table set, fed to every subject's standalone MoE timings;
/// with each later subject's own routing compared against it.
fn record_routing(
    subjects: &mut [&mut dyn Subject],
    w: Workload,
    seed: u64,
) -> Result<(ModelRouting, Vec<RoutingAgreement>), LedgerError> {
    let tokens = measured_prompt(subjects, w, seed)?;
    let (context, batch) = tokens.split_at(w.n_past);
    let mut first: Option<ModelRouting> = None;
    let mut agreements = Vec::new();
    for s in subjects.iter_mut() {
        if let Some(r) = s.model_routing(context, batch)? {
            match &first {
                None => first = Some(r),
                Some(f) => agreements.push(agreement(f, &r)),
            }
        }
    }
    if let Some(f) = first {
        return Ok((f, agreements));
    }
    Err(LedgerError::Config(
        "routing `model`: no engine here can record the model's routing (use --routing \
         realistic)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::fake::{FakeCall, FakeCosts, FakeSubject, ToyGraph, toy_graph};
    use crate::noise::ProbeChoice;
    use crate::subject::{OpTimingRequest, RunOutcome, SubjectError};

    fn quiet_config() -> MeasureConfig {
        let mut cfg = MeasureConfig::new(8, MachineInfo::default());
        cfg.noise.probe = ProbeChoice::Off;
        cfg
    }

    fn fake() -> FakeSubject {
        let mut costs = FakeCosts::default();
        costs.node_ms.insert(Category::DenseProj, 0.5);
        costs.node_ms.insert(Category::MoeGateUp, 2.0);
        FakeSubject::new(toy_graph(&ToyGraph::default()), costs)
    }

    #[test]
    fn measure_runs_every_protocol() {
        let mut s = fake();
        let m = measure(&mut s, &quiet_config()).unwrap();
        assert_eq!(m.schema, SCHEMA_VERSION);
        assert!(m.graph.ok());
        assert_eq!(m.e2e.prefill.stats.median_ms, 12.0);
        let ob = m.opbench.as_ref().unwrap();
        assert_eq!(ob.coverage.as_ref().unwrap().coverage_ratio, 1.0);
        assert!(m.replay.as_ref().unwrap().trusted);
        assert!(m.probe.complete);
        assert!(m.probe.runs_checked > 20);
        assert_eq!(m.dead_work.partial.len(), 8);
        assert!(m.graph_export.is_none());
    }

    #[test]
    fn model_routing_is_recorded_once_and_fed_to_every_subject() {
        let table: Vec<u32> = (0..16).map(|i| (i * 3) % 16).collect();
        let rec = ModelRouting::new(
            "a".into(),
            8,
            16,
            2,
            vec![crate::routing::LayerTable {
                layer: 1,
                n_tokens: 8,
                ids: table.clone(),
            }],
        )
        .unwrap();
        let mut a = fake();
        let mut b = fake();
        let mut cfg = quiet_config();
        cfg.replay = None;
        cfg.opbench.as_mut().unwrap().routing = Routing::Model;
        // Nobody can record it: a clear error, nothing timed.
        let e = measure_pair(&mut a, &mut b, &cfg).unwrap_err();
        assert!(e.to_string().contains("no engine here can record"), "{e}");
        // B records it (A cannot): both are fed B's table.
        b.routing = Some(rec);
        measure_pair(&mut a, &mut b, &cfg).unwrap();
        for s in [&a, &b] {
            assert!(!s.fed_tables.is_empty());
            assert!(s.fed_tables.iter().all(|(_, t)| *t == table));
        }
    }

    /// Two engines that both record: A's tables are fed, B's are compared with them, and a
    /// ledger of the two warns when B's router disagrees.
    #[test]
    fn a_second_recording_is_compared_and_disagreement_warned() {
        let table = |shift: u32| -> Vec<u32> {
            (0..8u32)
                .flat_map(|t| [(t + shift) % 16, (t + shift + 8) % 16])
                .collect()
        };
        let rec = |by: &str, ids: Vec<u32>| {
            ModelRouting::new(
                by.into(),
                8,
                16,
                2,
                vec![crate::routing::LayerTable {
                    layer: 1,
                    n_tokens: 8,
                    ids,
                }],
            )
            .unwrap()
        };
        let mut cfg = quiet_config();
        cfg.replay = None;
        cfg.opbench.as_mut().unwrap().routing = Routing::Model;
        for (shift, warned) in [(0, false), (1, true)] {
            let mut a = fake();
            let mut b = fake();
            a.routing = Some(rec("a", table(0)));
            b.routing = Some(rec("b", table(shift)));
            let (ma, mb) = measure_pair(&mut a, &mut b, &cfg).unwrap();
            assert!(b.fed_tables.iter().all(|(_, t)| *t == table(0)));
            let g = &ma.opbench.as_ref().unwrap().routing_agreement;
            assert_eq!(g, &mb.opbench.as_ref().unwrap().routing_agreement);
            assert_eq!(
                (g[0].sets, g[0].equal_sets),
                (8, if warned { 0 } else { 8 })
            );
            let l = crate::ledger::build_ledger(&ma, &mb);
            let w = l
                .warnings
                .iter()
                .any(|w| w.contains("b's own routing of the prompt differs"));
            assert_eq!(w, warned, "{:?}", l.warnings);
            assert!(
                l.notes
                    .iter()
                    .any(|n| n.starts_with("routing agreement: b's own router"))
            );
        }
    }

    #[test]
    fn missing_dispatches_are_flagged() {
        let mut s = fake();
        s.faults.missing_dispatches = 1;
        let mut cfg = quiet_config();
        cfg.opbench = None;
        cfg.replay = None;
        let m = measure(&mut s, &cfg).unwrap();
        assert!(!m.probe.complete);
        assert_eq!(m.probe.work_nodes, 36);
        assert_eq!(m.probe.runs_checked, 6); // 1 warm-up + 5 kept plain prefills
        assert_eq!(m.probe.mismatched_runs, 6);
        assert_eq!(
            m.probe.mismatches,
            vec![ProbeMismatch {
                series: "e2e: prefill: prefill".into(),
                dispatches: 35
            }]
        );
    }

    fn step_fake(depth: u64) -> FakeSubject {
        let mut costs = FakeCosts::default();
        costs.node_ms.insert(Category::DenseProj, 0.5);
        let toy = ToyGraph {
            n_tokens: 1,
            n_past: depth,
            ..ToyGraph::default()
        };
        FakeSubject::new(toy_graph(&toy), costs)
    }

    fn step_config(depth: usize) -> MeasureConfig {
        let mut cfg = MeasureConfig::for_workload(Workload::step_at(depth), MachineInfo::default());
        cfg.noise.probe = ProbeChoice::Off;
        cfg
    }

    #[test]
    fn a_decode_step_restores_its_context_before_every_run() {
        let mut s = step_fake(16);
        let m = measure(&mut s, &step_config(16)).unwrap();
        // The workload went through to every protocol and document.
        assert_eq!((m.n_tokens, m.n_past), (1, 16));
        assert_eq!((m.graph.n_tokens, m.graph.n_past), (1, 16));
        assert_eq!((m.e2e.n_tokens, m.e2e.n_past), (1, 16));
        let r = m.replay.as_ref().unwrap();
        assert_eq!((r.n_tokens, r.n_past), (1, 16));
        assert!(r.trusted, "{:?}", r.problems);
        assert!(m.probe.complete);
        assert_eq!(m.e2e.prefill.group.what, "e2e: decode step at depth 16");
        assert_eq!(m.e2e.prefill.label, "step");
        // Every timed run (e2e and replay, warm-up windows included) came right after a
        // restore of the 16-token context, and nothing else restored.
        let runs = s
            .calls
            .iter()
            .filter(|c| matches!(c, FakeCall::Prefill(_)))
            .count();
        assert!(runs > 30, "{runs} runs");
        assert_eq!(s.restores, runs);
        for (i, c) in s.calls.iter().enumerate() {
            if matches!(c, FakeCall::Prefill(_)) {
                assert_eq!(s.calls[i - 1], FakeCall::Restore(16), "call {i}");
            }
        }
        // The context is the prompt's first 16 tokens: the fake refuses any other length.
        let mut s = step_fake(8);
        let mut cfg = step_config(16);
        cfg.opbench = None;
        assert_eq!(
            measure(&mut s, &cfg).unwrap_err().to_string(),
            "toy: fake graph is built at position 8, asked for 16"
        );
    }

    #[test]
    fn a_prefill_restores_nothing() {
        let mut s = fake();
        let m = measure(&mut s, &quiet_config()).unwrap();
        assert_eq!(m.n_past, 0);
        assert_eq!(s.restores, 0);
        assert!(!s.calls.iter().any(|c| matches!(c, FakeCall::Restore(_))));
        assert_eq!(m.e2e.prefill.group.what, "e2e: prefill");
    }

    #[test]
    fn workload_names() {
        assert_eq!(Workload::prefill(512).label(), "pp512");
        assert_eq!(Workload::step_at(512).label(), "step-d512");
        assert_eq!(
            Workload::step_at(512).heading(),
            "step-d512 (decode step at depth 512)"
        );
        let w = Workload {
            n_past: 512,
            n_tokens: 4,
        };
        assert_eq!(w.label(), "pp4-d512");
        assert_eq!(Workload::step_at(64).total(), 65);
        assert!(Workload::prefill(8).is_prefill() && !Workload::prefill(8).is_step());
    }

    /// Answers every graph request with the graph it has, whatever the prompt length.
    struct WrongLength(FakeSubject);

    impl Subject for WrongLength {
        fn info(&self) -> EngineInfo {
            self.0.info()
        }
        fn graph(&mut self, _: Workload) -> Result<GraphExport, SubjectError> {
            Ok(self.0.graph.clone())
        }
        fn prefill(
            &mut self,
            c: &[u32],
            t: &[u32],
            m: &RunMode,
        ) -> Result<RunOutcome, SubjectError> {
            self.0.prefill(c, t, m)
        }
        fn decode(&mut self, p: &[u32], n: usize) -> Result<RunOutcome, SubjectError> {
            self.0.decode(p, n)
        }
        fn time_op(&mut self, r: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError> {
            self.0.time_op(r)
        }
    }

    #[test]
    fn a_graph_at_another_position_is_an_error() {
        let mut s = WrongLength(step_fake(0));
        let mut cfg = step_config(16);
        cfg.opbench = None;
        assert_eq!(
            measure(&mut s, &cfg).unwrap_err().to_string(),
            "invalid configuration: toy: asked for a graph at position 16, got one at 0"
        );
    }

    #[test]
    fn a_graph_for_another_prompt_length_is_an_error() {
        let mut s = WrongLength(fake());
        let mut cfg = quiet_config();
        cfg.n_tokens = 16;
        assert_eq!(
            measure(&mut s, &cfg).unwrap_err().to_string(),
            "invalid configuration: toy: asked for a graph of 16 tokens, got one of 8"
        );
    }

    #[test]
    fn wrong_prompt_length_and_bad_graph_are_errors() {
        let mut s = fake();
        let mut cfg = quiet_config();
        cfg.n_tokens = 16;
        assert_eq!(
            measure(&mut s, &cfg).unwrap_err().to_string(),
            "toy: fake graph is built for 8 tokens, asked for 16"
        );
        s.graph.expected[1].expected = 6;
        let err = measure(&mut s, &quiet_config()).unwrap_err().to_string();
        assert_eq!(
            err,
            "graph check failed for toy: routed-expert gate/up matmuls: expected 6 \
             (3 layers x 1 (fused gate/up)), found 3 in the graph"
        );
    }
}
