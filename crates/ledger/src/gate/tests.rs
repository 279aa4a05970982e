use std::collections::VecDeque;

use super::*;
use crate::category::Category;
use crate::fake::{FakeCosts, FakeSubject, ToyGraph, toy_graph};
use crate::noise::{CpuTimes, Interleave, LoadSample};
use crate::schema::{EngineInfo, GraphExport, Routing};
use crate::subject::{RunOutcome, SubjectError, Workload};

/// A probe replaying scripted readings (then idle ones).
struct Scripted(VecDeque<LoadSample>);

impl MachineProbe for Scripted {
    fn sample(&mut self) -> Option<LoadSample> {
        Some(self.0.pop_front().unwrap_or(LoadSample {
            loadavg_1m: 0.0,
            cpu: None,
            n_cpus: 4,
            self_ticks: None,
        }))
    }
}

fn load(loadavg_1m: f64, busy: u64, total: u64) -> LoadSample {
    LoadSample {
        loadavg_1m,
        cpu: Some(CpuTimes {
            busy_ticks: busy,
            total_ticks: total,
        }),
        n_cpus: 4,
        self_ticks: None,
    }
}

fn cfg() -> NoiseConfig {
    NoiseConfig {
        warmup_windows: 0,
        windows: 3,
        max_retries: 2,
        ..NoiseConfig::default()
    }
}

fn fake(engine: &str) -> FakeSubject {
    let mut costs = FakeCosts::default();
    costs.node_ms.insert(Category::DenseProj, 1.0);
    FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: engine.into(),
            ..ToyGraph::default()
        }),
        costs,
    )
}

fn plain(subject: usize, engine: &str) -> GroupEntry {
    GroupEntry {
        subject,
        spec: SeriesSpec {
            subject: subject as u32,
            engine: engine.into(),
            label: "plain".into(),
            action: Action::Prefill {
                mode: RunMode::Plain,
            },
        },
    }
}

#[test]
fn cpu_busy_window_is_discarded_with_the_load_recorded() {
    // Window 1: 4 CPUs, 300 of 400 ticks busy = 3 cores, subject 1 thread: 2 other cores busy.
    let probe = Scripted(VecDeque::from([load(0.5, 0, 1000), load(0.5, 300, 1400)]));
    let mut gate = Gate::new(cfg(), Box::new(probe)).unwrap();
    let mut a = fake("a");
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1, 2]), &[plain(0, "a")], "t")
        .unwrap();
    assert_eq!(rec.windows.len(), 4);
    assert_eq!(rec.discards(), 1);
    let w = &rec.windows[0];
    assert_eq!(w.status, WindowStatus::Discarded);
    assert_eq!(w.load.as_ref().unwrap().other_busy_cores, Some(2.0));
    assert_eq!(
        rec.discard_reasons(),
        vec!["CPU busy: 2.00 cores used by other processes (limit 0.50)"]
    );
    // The discarded run is kept in the record, its samples too.
    assert_eq!(w.runs[0].wall_ms, 12.0);
    assert_eq!(rec.samples_ms(0), vec![12.0, 12.0, 12.0]);
}

#[test]
fn a_machine_busy_throughout_ends_in_a_typed_error() {
    let busy: VecDeque<LoadSample> = (0..20).map(|_| load(9.0, 0, 1)).collect();
    let mut gate = Gate::new(cfg(), Box::new(Scripted(busy))).unwrap();
    let mut a = fake("a");
    let err = gate
        .run_group(
            &mut [&mut a],
            Prompt::fresh(&[1]),
            &[plain(0, "a")],
            "e2e: prefill",
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "e2e: prefill: no clean window after 3 discards (load average 9.00 with 1 subject \
         threads (limit +1.50))"
    );
}

#[test]
fn outliers_beyond_the_budget_are_kept_and_flagged() {
    let mut a = fake("a");
    a.faults.spike_prefills = vec![0, 3, 4, 5]; // more spikes than retries
    let mut gate = Gate::new(cfg(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &[plain(0, "a")], "t")
        .unwrap();
    assert!(rec.exhausted);
    assert_eq!(rec.kept().count(), 3);
}

#[test]
fn forward_and_mirror_interleaving() {
    let (mut a, mut b) = (fake("a"), fake("b"));
    let entries = [plain(0, "a"), plain(1, "b")];
    let mut gate = Gate::new(
        NoiseConfig {
            interleave: Interleave::Forward,
            ..cfg()
        },
        Box::new(NoProbe),
    )
    .unwrap();
    let rec = gate
        .run_group(&mut [&mut a, &mut b], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.series_of(1), vec![1]);
    assert_eq!(rec.select(&[1]).series[0].engine, "b");
    assert_eq!(a.calls.len(), 3);
    assert_eq!(b.calls.len(), 3);
    let bad = [plain(2, "c")];
    let err = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &bad, "t")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: t: a group needs at least one series, each naming one of the 1 subjects"
    );
}

/// Under mirrored interleaving a group keeps as many windows of each run order (at least half
/// of those asked, rounded up), also when discarded windows shift the parity; forward
/// interleaving and a group of one series keep exactly the windows asked.
#[test]
fn mirrored_groups_keep_both_orders_evenly() {
    let count = |rec: &GroupRecord| {
        let even = rec.kept().filter(|w| w.seq % 2 == 0).count();
        (even, rec.kept().count() - even)
    };
    let entries = [plain(0, "a"), observe(0, "a")];
    for spikes in [vec![], vec![2], vec![0, 2], vec![4, 6]] {
        let mut a = fake("a");
        a.faults.spike_prefills = spikes.clone();
        let mut gate = Gate::new(
            NoiseConfig {
                max_retries: 6,
                ..cfg()
            },
            Box::new(NoProbe),
        )
        .unwrap();
        let rec = gate
            .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
            .unwrap();
        assert!(!rec.exhausted, "spikes {spikes:?}");
        let (even, odd) = count(&rec);
        assert!(
            even >= 2 && odd >= 2,
            "spikes {spikes:?}: {even} + {odd} kept"
        );
        assert!(orders_balanced(&rec, 3, Interleave::Mirror));
    }
    // Forward: the windows asked, whatever their parity.
    let mut a = fake("a");
    let mut gate = Gate::new(
        NoiseConfig {
            interleave: Interleave::Forward,
            ..cfg()
        },
        Box::new(NoProbe),
    )
    .unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.kept().count(), 3);
    assert_eq!(count(&rec), (2, 1));
    assert!(!orders_balanced(&rec, 3, Interleave::Mirror));
    // One series: no order to balance.
    let mut a = fake("a");
    let mut gate = Gate::new(cfg(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &[plain(0, "a")], "t")
        .unwrap();
    assert_eq!(rec.kept().count(), 3);
}

/// A subject whose `time_op` returns scripted sample sets.
struct Scripts {
    engine: EngineInfo,
    sets: VecDeque<Vec<f64>>,
    busy: VecDeque<bool>,
}

impl Subject for Scripts {
    fn info(&self) -> EngineInfo {
        self.engine.clone()
    }
    fn graph(&mut self, _: Workload) -> Result<GraphExport, SubjectError> {
        unreachable!()
    }
    fn prefill(&mut self, _: &[u32], _: &[u32], _: &RunMode) -> Result<RunOutcome, SubjectError> {
        unreachable!()
    }
    fn decode(&mut self, _: &[u32], _: usize) -> Result<RunOutcome, SubjectError> {
        unreachable!()
    }
    fn time_op(&mut self, _: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError> {
        Ok(self.sets.pop_front().unwrap_or_default())
    }
    fn busy_reason(&mut self) -> Option<String> {
        self.busy
            .pop_front()
            .unwrap_or(false)
            .then(|| "other GPU process".into())
    }
}

#[test]
fn op_timing_remeasures_noisy_and_busy_calls() {
    let g = toy_graph(&ToyGraph::default());
    let mut s = Scripts {
        engine: g.engine.clone(),
        // 1st: busy before; 2nd: 3 of 10 samples wild (> 20%); 3rd: clean.
        sets: VecDeque::from([
            vec![1.0; 10],
            vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 9.0],
            vec![1.0, 1.01, 0.99, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ]),
        busy: VecDeque::from([true]),
    };
    let req = OpTimingRequest {
        node: &g.nodes[2],
        routing: Routing::Realistic,
        recorded: None,
        layers: &[],
        seed: 1,
        warmup: 1,
        reps: 10,
    };
    let mut gate = Gate::new(
        NoiseConfig {
            max_retries: 5,
            ..cfg()
        },
        Box::new(NoProbe),
    )
    .unwrap();
    let rec = gate.time_op(&mut s, &req).unwrap();
    assert_eq!(rec.attempts.len(), 3);
    assert_eq!((rec.used, rec.discards(), rec.exhausted), (2, 2, false));
    assert_eq!(
        rec.attempts[0].reasons[0].to_string(),
        "toy busy: other GPU process"
    );
    assert_eq!(
        rec.attempts[1].reasons[0].to_string(),
        "3 of 10 samples are outliers (limit 20%)"
    );
    assert_eq!(rec.used_samples().len(), 10);
    // An empty answer is a typed error.
    let err = gate.time_op(&mut s, &req).unwrap_err();
    assert_eq!(
        err.to_string(),
        "toy: time_op blk.0.attn_q (no samples) returned an invalid time NaN ms"
    );
}

#[test]
fn negative_times_are_rejected() {
    let g = toy_graph(&ToyGraph::default());
    let mut s = Scripts {
        engine: g.engine.clone(),
        sets: VecDeque::from([vec![1.0, -0.5]]),
        busy: VecDeque::new(),
    };
    let req = OpTimingRequest {
        node: &g.nodes[2],
        routing: Routing::Realistic,
        recorded: None,
        layers: &[],
        seed: 1,
        warmup: 0,
        reps: 2,
    };
    let mut gate = Gate::new(cfg(), Box::new(NoProbe)).unwrap();
    assert_eq!(
        gate.time_op(&mut s, &req).unwrap_err().to_string(),
        "toy: time_op blk.0.attn_q returned an invalid time -0.5 ms"
    );
}

fn observe(subject: usize, engine: &str) -> GroupEntry {
    GroupEntry {
        subject,
        spec: SeriesSpec {
            subject: subject as u32,
            engine: engine.into(),
            label: "observe(dense_proj)".into(),
            action: Action::Prefill {
                mode: RunMode::Observe([Category::DenseProj].into_iter().collect()),
            },
        },
    }
}

/// A machine still settling (each prefill faster than the one before) during the first windows:
/// warm-up goes on until two windows agree, so every kept window is past it and the paired
/// differences are exact; with the settle rule off, the same run keeps biased windows.
#[test]
fn warm_up_goes_on_until_the_machine_settles() {
    let warming = |n: usize| {
        let mut a = fake("a");
        a.costs.observe_barrier_ms = 0.25;
        a.faults.warming_prefills = n;
        a
    };
    let settle_cfg = NoiseConfig {
        warmup_windows: 1,
        ..cfg()
    };
    let entries = [plain(0, "a"), observe(0, "a")];
    // Two prefills (one window) warming: window 1 differs from warm-up window 0, so it is warm-up
    // too; window 2 agrees with it and is the first kept one.
    let mut a = warming(2);
    let mut gate = Gate::new(settle_cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    let warm = rec
        .windows
        .iter()
        .filter(|w| w.status == WindowStatus::Warmup)
        .count();
    assert_eq!(warm, 2);
    let exact = 0.25 * a.nodes_in(Category::DenseProj) as f64;
    assert!(exact > 0.0);
    assert!(rec.paired_ms(0, 1).iter().all(|d| (d - exact).abs() < 1e-9));
    // Six prefills warming: warm-up stops at max_warmup_windows (4), past the warming.
    let mut a = warming(6);
    let mut gate = Gate::new(settle_cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(
        rec.windows
            .iter()
            .filter(|w| w.status == WindowStatus::Warmup)
            .count(),
        4
    );
    assert!(rec.paired_ms(0, 1).iter().all(|d| (d - exact).abs() < 1e-9));
    // The rule off (at most the fixed warm-up): the first kept windows are still warming and
    // their paired differences are off.
    let mut a = warming(6);
    let off = NoiseConfig {
        max_warmup_windows: 1,
        ..settle_cfg
    };
    let mut gate = Gate::new(off, Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert!(rec.paired_ms(0, 1).iter().any(|d| (d - exact).abs() > 1e-3));
}

#[test]
fn no_warm_up_means_none() {
    let mut a = fake("a");
    a.faults.warming_prefills = 4;
    let mut gate = Gate::new(cfg(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &[plain(0, "a")], "t")
        .unwrap();
    assert!(rec.windows.iter().all(|w| w.status != WindowStatus::Warmup));
}

fn replay(subject: usize, engine: &str, times: u32) -> GroupEntry {
    GroupEntry {
        subject,
        spec: SeriesSpec {
            subject: subject as u32,
            engine: engine.into(),
            label: format!("replay(dense_proj) x{times}"),
            action: Action::Prefill {
                mode: RunMode::Replay {
                    categories: [Category::DenseProj].into_iter().collect(),
                    times,
                },
            },
        },
    }
}

/// A host that runs every other window 1.4x slower (the 2-core VMs switch levels for seconds
/// at a time): with four series a window, each window's level takes the switch out, so no
/// window is an outlier and every paired difference is exact; one slow run inside a window is
/// still an outlier. With two series a window there are no levels, and the same host makes
/// the gate discard windows.
#[test]
fn window_levels_take_out_a_host_that_switches_speed() {
    let switching = || {
        let mut a = fake("a");
        a.costs.observe_barrier_ms = 0.25;
        a.costs.replay_barrier_ms = 0.1;
        a.faults.level_switch = Some((4, 1.4));
        a
    };
    let entries = [
        plain(0, "a"),
        observe(0, "a"),
        replay(0, "a", 1),
        replay(0, "a", 2),
    ];
    // Forward order: mirrored windows would keep 3 + 3 (both run orders evenly), and with as
    // many slow windows as fast ones no level is the typical one.
    let cfg = NoiseConfig {
        windows: 5,
        max_retries: 4,
        interleave: Interleave::Forward,
        ..cfg()
    };
    let mut a = switching();
    let mut gate = Gate::new(cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.discards(), 0, "{:?}", rec.discard_reasons());
    assert!(!rec.exhausted);
    // Windows 0, 2, 4 fast, 1 and 3 slow: the median level is the fast one.
    let levels = rec.levels();
    assert_eq!(levels.len(), 5);
    for (i, l) in levels.iter().enumerate() {
        let want = if i % 2 == 1 { 1.4 } else { 1.0 };
        assert!((l - want).abs() < 1e-9, "window {i}: level {l}");
    }
    let exact = 0.25 * a.nodes_in(Category::DenseProj) as f64;
    assert!(exact > 0.0);
    assert!(rec.paired_ms(0, 1).iter().all(|d| (d - exact).abs() < 1e-9));
    let plain_ms = a.plain_ms();
    assert!(
        rec.samples_ms(0)
            .iter()
            .all(|x| (x - plain_ms).abs() < 1e-9)
    );
    // The raw times are kept as measured.
    assert!(
        rec.windows
            .iter()
            .any(|w| (w.runs[0].wall_ms - 1.4 * plain_ms).abs() < 1e-9)
    );

    // One 10x run inside a window is not a level: it is still an outlier.
    let mut a = switching();
    a.faults.spike_prefills = vec![9];
    let mut gate = Gate::new(cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.discards(), 1, "{:?}", rec.discard_reasons());

    // Two series a window: no levels, so the switch makes outliers of the slow windows.
    let mut a = switching();
    a.faults.level_switch = Some((2, 1.4));
    let mut gate = Gate::new(cfg, Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(
            &mut [&mut a],
            Prompt::fresh(&[1]),
            &[plain(0, "a"), observe(0, "a")],
            "t",
        )
        .unwrap();
    assert!(rec.levels().iter().all(|l| *l == 1.0));
    assert!(rec.discards() > 0);
}

/// The runs of a sample go in rounds over the subject's block: a host that runs 4 calls in 8
/// at 1.5x (a speed level held for a while) still leaves each series a run at the fast level,
/// since a series' three runs lie 2 calls apart and span 5 calls. Back to back (the three runs
/// of a series adjacent) the slow level took all of the plain series' runs in window 2 (calls
/// 12-14) and of the observe series' in window 3 (21-23): outliers, and with no retries the
/// group was exhausted. So this fails on back-to-back runs.
#[test]
fn best_of_runs_in_rounds_across_a_level_switch() {
    let entries = [plain(0, "a"), observe(0, "a")];
    let cfg = NoiseConfig {
        windows: 4,
        max_retries: 0,
        best_of: 3,
        interleave: Interleave::Forward,
        ..cfg()
    };
    let mut a = fake("a");
    a.faults.level_switch = Some((4, 1.5));
    let plain_ms = a.plain_ms();
    let mut gate = Gate::new(cfg, Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.discards(), 0, "{:?}", rec.discard_reasons());
    assert!(!rec.exhausted);
    assert_eq!(rec.kept().count(), 4);
    for s in 0..2 {
        let xs = rec.samples_ms(s);
        assert!(
            xs.iter().all(|x| (x - plain_ms).abs() < 0.01 * plain_ms),
            "{s}: {xs:?}"
        );
    }
}

#[test]
fn best_of_keeps_the_fastest_run_of_each_sample() {
    let entries = [plain(0, "a"), observe(0, "a")];
    let cfg = NoiseConfig {
        windows: 4,
        max_retries: 0,
        best_of: 3,
        ..cfg()
    };
    // Prefill calls 4 and 13 take 10x: each inside one sample of three runs.
    let mut a = fake("a");
    a.faults.spike_prefills = vec![4, 13];
    let mut gate = Gate::new(cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert_eq!(rec.discards(), 0, "{:?}", rec.discard_reasons());
    assert!(!rec.exhausted);
    let prefills = a
        .calls
        .iter()
        .filter(|c| matches!(c, crate::fake::FakeCall::Prefill(_)))
        .count();
    assert_eq!(prefills, 4 * 2 * 3);
    let plain_ms = a.plain_ms();
    assert!(
        rec.samples_ms(0)
            .iter()
            .all(|x| (x - plain_ms).abs() < 1e-9)
    );

    // One run a sample: the same spikes are outliers, and with no retries the group is
    // exhausted (the rule can fail).
    let mut a = fake("a");
    a.faults.spike_prefills = vec![2];
    let mut gate = Gate::new(
        NoiseConfig {
            best_of: 1,
            ..cfg.clone()
        },
        Box::new(NoProbe),
    )
    .unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    assert!(rec.exhausted);

    // A run whose output differs from its sample's others (call 8: window 1, mirrored, runs
    // observe, plain in rounds from call 6; call 8 is the observe series' second run, not its
    // fastest) leaves that sample a digest no run had.
    let mut a = fake("a");
    a.faults.odd_digest_prefills = vec![8];
    let mut gate = Gate::new(cfg.clone(), Box::new(NoProbe)).unwrap();
    let rec = gate
        .run_group(&mut [&mut a], Prompt::fresh(&[1]), &entries, "t")
        .unwrap();
    let digests: Vec<u64> = rec
        .windows
        .iter()
        .map(|w| w.runs[1].output_digest)
        .collect();
    assert_ne!(digests[1], digests[0]);
    assert!(
        digests
            .iter()
            .enumerate()
            .all(|(i, d)| i == 1 || *d == digests[0])
    );
    assert!(
        rec.windows
            .iter()
            .all(|w| w.runs[0].output_digest == digests[0])
    );

    let bad = NoiseConfig {
        best_of: 0,
        ..NoiseConfig::default()
    };
    assert!(bad.validate().is_err());
}
