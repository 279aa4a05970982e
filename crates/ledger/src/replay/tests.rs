use std::collections::BTreeMap;

use super::*;
use crate::fake::{FakeCall, FakeCosts, FakeSubject, ToyGraph, toy_graph};
use crate::noise::{DiscardReason, ProbeChoice};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

/// Per-node costs of the toy graph's categories; the toy has
/// embedding 1, norm 4, dense 12, layout 3, attention 3, elementwise 3, router 3,
/// gate/up 3, down 3, output head 1 work nodes (36).
fn costs() -> FakeCosts {
    let node_ms: BTreeMap<Category, f64> = [
        (Category::Embedding, 0.2),
        (Category::Norm, 0.1),
        (Category::DenseProj, 0.5),
        (Category::Layout, 0.3),
        (Category::Attention, 0.4),
        (Category::Elementwise, 0.05),
        (Category::Router, 0.1),
        (Category::MoeGateUp, 2.0),
        (Category::MoeDown, 1.0),
        (Category::OutputHead, 0.6),
    ]
    .into_iter()
    .collect();
    FakeCosts {
        node_ms,
        observe_barrier_ms: 0.01,
        replay_barrier_ms: 0.01,
        ..FakeCosts::default()
    }
}

fn fake() -> FakeSubject {
    FakeSubject::new(toy_graph(&ToyGraph::default()), costs())
}

fn cfg() -> ReplayConfig {
    ReplayConfig {
        noise: NoiseConfig {
            probe: ProbeChoice::Off,
            ..NoiseConfig::default()
        },
        ..ReplayConfig::default()
    }
}

fn run(s: &mut FakeSubject) -> ReplayReport {
    let g = s.graph.clone();
    replay(s, &g, &cfg()).unwrap()
}

#[test]
fn exact_figures_from_a_deterministic_subject() {
    let mut s = fake();
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
    // Node costs sum to 18.75 ms; 36 work nodes x 0.01 ms observe barrier = 0.36 ms.
    assert!(close(r.plain.median_ms, 18.75));
    assert!(close(r.observe_all.median_ms, 19.11));
    assert!(close(r.observation.cost_ms, 0.36));
    assert!(close(r.observation.cost_ratio.unwrap(), 0.36 / 18.75));
    // Replaying all adds every node again plus a 0.01 ms barrier per node: 19.11.
    assert!(close(r.increment_all.median_ms, 19.11));
    // Per category: cost + 0.01 x nodes. Dense: 12 x 0.5 + 0.12 = 6.12.
    let dense = r.category(Category::DenseProj).unwrap();
    assert!(close(dense.increment.median_ms, 6.12));
    assert_eq!(
        (dense.increment.iqr_ms, dense.increment.n, dense.nodes),
        (0.0, 6, 12)
    );
    assert!(close(dense.baseline.median_ms, 18.75 + 0.12));
    let gu = r.category(Category::MoeGateUp).unwrap();
    assert!(close(gu.increment.median_ms, 6.03));
    assert!(close(r.sum_of_increments_ms, 19.11));
    // Checks (a) and (b) match exactly; (c) is run on the largest category, dense (6.12).
    let v = &r.validations;
    assert!(v.all_at_once.deviation_ratio.unwrap() < 1e-12);
    assert!(v.sum_of_parts.pass && v.all_at_once.pass);
    assert_eq!(v.linearity.category, Category::DenseProj);
    let fit = v.linearity.fit.as_ref().unwrap();
    assert!(close(fit.slope_ms, 6.12) && fit.intercept_ms.abs() < 1e-9 && close(fit.r2, 1.0));
    // Measured from the first replay: 0, 1 and 3 dispatches beyond it.
    assert_eq!(v.linearity.increments_ms.len(), 3);
    assert_eq!(v.linearity.base_replays, 1);
    assert!(close(v.linearity.increments_ms[2], 3.0 * 6.12));
    assert!(v.digest.pass);
    assert_eq!(v.digest.distinct_plain_digests, 1);
    assert_eq!(r.categories.len(), 10);
    assert_eq!(r.discards, 0);
    assert!(r.upper_bound_note.contains("upper bound"));
}

/// Time outside the nodes (graph building, scheduling, host work) is in no category and no
/// replay repeats it: checks (a) and (b) compare with the time inside the nodes, and the rest
/// is its own figure. 5 ms of gaps: a 20.7% shortfall against the wall time, none against the
/// node time.
#[test]
fn time_outside_the_nodes_is_its_own_figure() {
    let mut s = fake();
    s.costs.gap_ms = 5.0;
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
    assert!(close(r.observe_all.median_ms, 24.11));
    assert!(close(r.observation.in_node_ms.unwrap(), 19.11));
    assert!(close(r.observation.outside_nodes_ms.unwrap(), 5.0));
    assert!(r.validations.all_at_once.deviation_ratio.unwrap() < 1e-12);
    assert!(close(r.validations.sum_of_parts.reference_ms, 19.11));
}

/// From an engine that cannot tell its node time (and in records made before it was asked),
/// (a) and (b) compare with the observe-all wall time, and the same gaps fail both.
#[test]
fn without_node_times_uncovered_time_fails_all_at_once_and_sum_of_parts() {
    let mut s = fake();
    s.costs.gap_ms = 5.0; // host gaps no category accounts for
    s.faults.no_node_time = true;
    let r = run(&mut s);
    assert!(!r.trusted);
    assert_eq!(r.observation.in_node_ms, None);
    // observe-all = 18.75 + 5 + 0.36 = 24.11, increments 19.11: 20.7% off.
    let text: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 2, "{text:?}");
    assert_eq!(
        text[0],
        "(a) replaying every category at once added 19.110 ms vs the observe-all run's \
         24.110 ms of wall time (the engine does not time its nodes) (-20.7%, tolerance 10%)"
    );
    assert_eq!(
        text[1],
        "(b) per-category increments sum to 19.110 ms vs the observe-all run's 24.110 ms \
         of wall time (the engine does not time its nodes) (-20.7%, tolerance 10%)"
    );
    assert!(close(
        r.validations.all_at_once.deviation_ratio.unwrap(),
        5.0 / 24.11
    ));
}

/// Check (a) reads the replay-all runs' own node time (series 2 of the all-categories group):
/// their replays against the nodes they repeat, in the same runs. Doubling that node time in
/// the record makes the replays read as taking nothing (wall - 2 x nodes = 0 with no gaps
/// outside them): (a) then fails on re-analysis, saying it compared inside the same runs, and
/// (b) (the observe run's node time) is unchanged. And a record without node times (made
/// before they were asked) is judged against the wall time: the 5 ms of gaps then fail (a)
/// and (b), saying so.
#[test]
fn reanalysis_reads_the_replay_runs_node_time_and_old_records_the_wall_time() {
    let mut s = fake();
    s.costs.gap_ms = 5.0;
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
    assert!(r.validations.all_at_once_same_run);
    assert!(close(r.validations.all_at_once.reference_ms, 19.11));
    let mut doubled = r.clone();
    for w in &mut doubled.all_group.windows {
        if let Some(t) = w.runs[2].in_node_ms.as_mut() {
            *t *= 2.0;
        }
    }
    let again = doubled.reanalysed(&r.recorded_config()).unwrap();
    assert_eq!(again.validations.sum_of_parts, r.validations.sum_of_parts);
    assert_eq!(again.observation, r.observation);
    assert!(!again.trusted);
    assert_eq!(again.problems.len(), 1, "{:?}", again.problems);
    let text = again.problems[0].to_string();
    assert!(
        text.starts_with("(a) replaying every category at once: the replays took ")
            && text.contains("against the 38.220 ms of the nodes they repeat, in the same runs")
            && text.contains("(-100.0%, tolerance 10%)"),
        "{text}"
    );
    let mut old = r.clone();
    for w in &mut old.all_group.windows {
        for run in &mut w.runs {
            run.in_node_ms = None;
        }
    }
    let judged = old.reanalysed(&r.recorded_config()).unwrap();
    assert_eq!(judged.observation.in_node_ms, None);
    assert!(!judged.trusted);
    assert!(judged.problems.iter().all(|p| matches!(
        p,
        ReplayProblem::AllAtOnce {
            node_time: false,
            ..
        } | ReplayProblem::SumOfParts {
            node_time: false,
            ..
        }
    )));
    assert_eq!(judged.problems.len(), 2);
    // A record without the field at all (JSON written before it existed) reads as None.
    let json = serde_json::to_string(&old.all_group).unwrap();
    assert!(!json.contains("in_node_ms"));
    let back: GroupRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back, old.all_group);
}

/// With each sample the fastest of two runs, the node time kept is the kept run's: every first
/// run of a pair is a 10x spike here, and a node time taken from it would read 10x.
#[test]
fn best_of_keeps_the_node_time_of_the_run_it_keeps() {
    let mut s = fake();
    s.faults.spike_prefills = (0..4000).step_by(2).collect();
    let mut c = cfg();
    c.noise.best_of = 2;
    let g = s.graph.clone();
    let r = replay(&mut s, &g, &c).unwrap();
    let observe = r.all_group.runs(1);
    assert!(!observe.is_empty());
    for run in &observe {
        assert!(
            close(run.wall_ms, 19.11) && close(run.in_node_ms.unwrap(), 19.11),
            "{run:?}"
        );
    }
}

#[test]
fn a_small_gap_stays_within_tolerance() {
    let mut s = fake();
    s.faults.no_node_time = true; // compared with the wall time
    s.costs.gap_ms = 1.0; // 1 / 20.11 = 5% < 10%
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
}

#[test]
fn nonlinear_replay_is_untrusted() {
    let mut s = fake();
    s.faults.replay_power = 2.0; // k replays cost k^2
    let r = run(&mut s);
    assert!(!r.trusted);
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let lin = &r.validations.linearity;
    assert!(!lin.pass);
    // Over the first replay (4 - 1 = 3 and 16 - 1 = 15 units of 6.12 ms at 1 and 3 more
    // replays): 0, 18.36, 91.8; slope 6.12 * 36/7, intercept -6.12 * 6/7, r2 48/49.
    let fit = lin.fit.as_ref().unwrap();
    assert!(close(fit.slope_ms, 6.12 * 36.0 / 7.0));
    assert!(close(fit.intercept_ms, -6.12 * 6.0 / 7.0));
    assert!(close(fit.r2, 48.0 / 49.0));
    assert!(
        r.problems[0]
            .to_string()
            .starts_with("(c) replays of dense_proj do not grow linearly")
    );
}

#[test]
fn replay_that_changes_outputs_is_untrusted_for_that_category() {
    let mut s = fake();
    s.faults.replay_changes_digest = Some(Category::Norm);
    let r = run(&mut s);
    assert!(!r.trusted);
    assert!(!r.validations.digest.pass);
    assert_eq!(
        r.validations.digest.changed_by,
        vec!["replay(all) x1", "replay(norm) x1"]
    );
    let norm = r.category(Category::Norm).unwrap();
    assert!(!norm.digest_ok && !norm.trusted);
    assert!(r.category(Category::DenseProj).unwrap().trusted);
    let text: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "(d) replay(all) x1 changed the output digest",
            "(d) replay(norm) x1 changed the output digest"
        ]
    );
}

#[test]
fn replay_that_speeds_up_is_untrusted() {
    let mut s = fake();
    s.faults.replay_speeds_up = Some(Category::Elementwise);
    let r = run(&mut s);
    let ew = r.category(Category::Elementwise).unwrap();
    assert!(!ew.trusted);
    assert!(close(ew.increment.median_ms, -0.18));
    assert!(r.problems.iter().any(|p| matches!(
        p,
        ReplayProblem::NegativeIncrement {
            category: Category::Elementwise,
            ..
        }
    )));
}

#[test]
fn busy_window_is_discarded_recorded_and_remeasured() {
    let mut s = fake();
    s.faults.busy_checks = 1; // the first check, before the first gated window
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
    assert_eq!(r.discards, 1);
    let w = &r.all_group.windows;
    // 1 warm-up, 1 discarded, 6 kept (5 asked; the discard left 3 + 2 of the two run orders).
    assert_eq!(w.len(), 8);
    assert_eq!(w[1].status, crate::gate::WindowStatus::Discarded);
    assert_eq!(
        w[1].reasons,
        vec![DiscardReason::SubjectBusy {
            engine: "toy".into(),
            reason: "fake: another job".into()
        }]
    );
    assert_eq!(r.all_group.kept().count(), 6);
    assert_eq!(
        r.all_group.discard_reasons(),
        vec!["toy busy: fake: another job"]
    );
}

#[test]
fn outlier_window_is_discarded_and_remeasured() {
    let mut s = fake();
    // Prefill #4: window seq 1 runs mirrored (replay-all, observe-all, plain): observe-all spikes.
    s.faults.spike_prefills = vec![4];
    let r = run(&mut s);
    assert!(r.trusted, "{:?}", r.problems);
    assert_eq!(r.discards, 1);
    let discarded: Vec<_> = r
        .all_group
        .windows
        .iter()
        .filter(|w| !w.reasons.is_empty())
        .collect();
    assert_eq!(discarded.len(), 1);
    assert_eq!(discarded[0].seq, 1);
    match &discarded[0].reasons[..] {
        [
            DiscardReason::Outlier {
                series, value_ms, ..
            },
        ] => {
            assert_eq!(series, "toy observe(all)");
            assert!(close(*value_ms, 191.1));
        }
        other => panic!("{other:?}"),
    }
    assert!(close(r.observe_all.median_ms, 19.11));
}

#[test]
fn pair_interleaves_and_reports_each_side() {
    let mut a = fake();
    let mut b = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "peer".into(),
            ..ToyGraph::default()
        }),
        costs(),
    );
    b.costs.node_ms.insert(Category::DenseProj, 0.25);
    let (ga, gb) = (a.graph.clone(), b.graph.clone());
    let (ra, rb) = replay_pair(&mut a, &ga, &mut b, &gb, &cfg()).unwrap();
    assert!(ra.trusted && rb.trusted);
    assert_eq!(ra.engine, "toy");
    assert_eq!(rb.engine, "peer");
    assert!(close(
        rb.category(Category::DenseProj)
            .unwrap()
            .increment
            .median_ms,
        3.12
    ));
    assert!(close(
        ra.category(Category::DenseProj)
            .unwrap()
            .increment
            .median_ms,
        6.12
    ));
    // Each side's record holds only its own series.
    assert!(ra.all_group.series.iter().all(|s| s.engine == "toy"));
    // Warm-up window: A plain, A observe, A replay, B plain...; next window mirrored: B first.
    let first_a = &a.calls[..3];
    assert_eq!(first_a[0], FakeCall::Prefill(RunMode::Plain));
    assert_eq!(b.calls[0], FakeCall::Prefill(RunMode::Plain));
    assert!(matches!(
        a.calls[3],
        FakeCall::Prefill(RunMode::Replay { .. })
    ));
}

#[test]
fn bad_configs_are_errors() {
    let mut s = fake();
    let g = s.graph.clone();
    let c = ReplayConfig {
        replays: vec![1, 1],
        ..cfg()
    };
    assert_eq!(
        replay(&mut s, &g, &c).unwrap_err().to_string(),
        "invalid configuration: replay: replays needs at least two distinct counts, all >= 1 (e.g. 1,2,4)"
    );
    let c = ReplayConfig {
        tolerance_ratio: 0.0,
        ..cfg()
    };
    assert_eq!(
        replay(&mut s, &g, &c).unwrap_err().to_string(),
        "invalid configuration: replay: tolerance_ratio must be within (0, 1)"
    );
    let c = ReplayConfig {
        categories: Some(vec![Category::Rope]),
        ..cfg()
    };
    assert_eq!(
        replay(&mut s, &g, &c).unwrap_err().to_string(),
        "graph of toy has no work nodes (all 39 nodes are views)"
    );
}

#[test]
fn tolerance_and_linearity_rules_by_hand() {
    let t = tolerance_check(605.4, 605.3, 0.1);
    assert!(t.pass);
    assert!(close(t.deviation_ratio.unwrap(), 0.1 / 605.3));
    let t = tolerance_check(111.0, 100.0, 0.1);
    assert!(!t.pass);
    assert!(!tolerance_check(1.0, 0.0, 0.1).pass);
    // 162 ms per replay, as in the write-up: exact line passes.
    let l = linearity_check(
        Category::DenseProj,
        &[1, 2, 4],
        0,
        &[162.0, 324.0, 648.0],
        0.98,
        0.1,
    );
    assert!(l.pass);
    // A constant overhead of 30 ms per run: intercept 30 > 10% of 162.
    let l = linearity_check(
        Category::DenseProj,
        &[1, 2, 4],
        0,
        &[192.0, 354.0, 678.0],
        0.98,
        0.1,
    );
    assert!(!l.pass);
    assert!(close(l.fit.unwrap().intercept_ms, 30.0));
    // Noisy but linear: passes.
    let l = linearity_check(
        Category::DenseProj,
        &[1, 2, 4],
        0,
        &[160.0, 326.0, 647.0],
        0.98,
        0.1,
    );
    assert!(l.pass);
}

#[test]
fn mismatched_graphs_are_errors() {
    let mut a = fake();
    let mut b = fake();
    let ga = a.graph.clone();
    let gb = toy_graph(&ToyGraph {
        n_tokens: 16,
        ..ToyGraph::default()
    });
    assert_eq!(
        replay_pair(&mut a, &ga, &mut b, &gb, &cfg())
            .unwrap_err()
            .to_string(),
        "invalid configuration: replay: the graphs are for different prompt lengths"
    );
    assert_eq!(
        replay_many(&mut [&mut a], &[&ga, &gb], &cfg())
            .unwrap_err()
            .to_string(),
        "invalid configuration: replay: one graph per subject, at least one subject"
    );
}

#[test]
fn observation_that_changes_the_output_does_not_untrust_replay() {
    let mut s = fake();
    s.faults.observe_changes_digest = Some(Category::Norm);
    let g = s
        .graph(crate::subject::Workload::prefill(8))
        .expect("graph");
    let r = replay(&mut s, &g, &cfg()).expect("replay");
    assert!(r.validations.digest.pass, "{:?}", r.validations.digest);
    assert!(r.validations.digest.observation_changes_output);
    assert!(r.trusted, "{:?}", r.problems);
}

#[test]
fn a_negative_median_within_the_noise_is_not_a_speed_up() {
    // The embedding of the 35B-A3B on the H200: one node of ~20 us replayed in a 64 ms run.
    let noisy = [-0.173, -0.134, -0.068, 0.271, 0.362];
    assert!(!super::faster_beyond_noise(&noisy, 14));
    // llama.cpp's output head (one row) on the 2-core VM: four of five windows below zero,
    // the mean 1.0 standard error below zero: chance.
    let chance = [-0.60, -0.30, -0.24, -0.10, 0.40];
    assert!(!super::faster_beyond_noise(&chance, 14));
    // Consistent from window to window: a speed-up, also among 14 categories.
    let consistent = [-0.20, -0.19, -0.21, -0.18, -0.20, -0.19, -0.22];
    assert!(super::faster_beyond_noise(&consistent, 14));
    // Deterministic: any negative value is a speed-up; a positive one never.
    assert!(super::faster_beyond_noise(&[-0.01; 5], 14));
    assert!(!super::faster_beyond_noise(&[0.01; 5], 14));
    assert!(!super::faster_beyond_noise(&[], 14));
}

/// Student's t upper tail against closed forms and table values.
#[test]
fn student_t_tails() {
    let t = super::student_t_upper_tail;
    assert!((t(1.0, 1) - 0.25).abs() < 1e-12, "Cauchy");
    assert!((t(2.0, 2) - (1.0 - 2.0 / 6f64.sqrt()) / 2.0).abs() < 1e-12);
    assert!((t(0.0, 7) - 0.5).abs() < 1e-12);
    // Table: one-sided 5%, 1% and 0.1% points.
    for (x, nu, p) in [
        (2.015, 5, 0.05),
        (3.143, 6, 0.01),
        (2.764, 10, 0.01),
        (4.785, 7, 0.001),
        (3.552, 20, 0.001),
    ] {
        let got = t(x, nu);
        assert!(
            (got - p).abs() < 0.003 * p + 1e-6,
            "P(T_{nu} > {x}) = {got}, table {p}"
        );
    }
}

/// Pure noise must not read as a speed-up more often than the family-wise rate allows: 20,000
/// simulated categories of 7 windows of Gaussian noise, tested as one of 14 categories, flag
/// about 0.07% (1% / 14); the test before 2026-12-05 (median 3 MAD standard errors below zero)
/// flagged 2.6%, which fails this. A consistent speed-up of 3 standard deviations is still
/// flagged nearly always.
#[test]
fn pure_noise_is_rarely_a_speed_up() {
    let mut rng = crate::rng::SplitMix64::new(20261205);
    let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let mut gauss = move || {
        let (u1, u2) = (unit().max(1e-300), unit());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    let trials = 20_000;
    let (mut noise_flags, mut shift_flags) = (0, 0);
    for _ in 0..trials {
        let noise: Vec<f64> = (0..7).map(|_| gauss()).collect();
        noise_flags += usize::from(super::faster_beyond_noise(&noise, 14));
        let shifted: Vec<f64> = (0..7).map(|_| gauss() - 3.0).collect();
        shift_flags += usize::from(super::faster_beyond_noise(&shifted, 14));
    }
    let noise_rate = noise_flags as f64 / trials as f64;
    let shift_rate = shift_flags as f64 / trials as f64;
    assert!(noise_rate < 0.002, "pure noise flagged {noise_rate}");
    assert!(
        shift_rate > 0.85,
        "a 3-sigma speed-up flagged only {shift_rate}"
    );
}

#[test]
fn reanalysing_recorded_windows_gives_the_same_report() {
    let mut s = fake();
    s.faults.replay_speeds_up = Some(Category::Elementwise);
    let r = run(&mut s);
    let again = r.reanalysed(&ReplayConfig::default()).unwrap();
    assert_eq!(again, r);
    assert_eq!(r.reanalysed(&r.recorded_config()).unwrap(), r);
    // A stricter tolerance fails (a) and (b) on the same windows without re-measuring.
    let strict = ReplayConfig {
        tolerance_ratio: 0.0,
        ..ReplayConfig::default()
    };
    let judged = r.reanalysed(&strict).unwrap();
    assert_eq!(judged.all_group, r.all_group);
    assert!(!judged.validations.sum_of_parts.pass);
}

#[test]
fn a_group_run_at_another_speed_is_brought_to_the_baseline_level() {
    // The host runs 1.5x slower for the whole of the MoE gate/up group (6.03 of the 19.11 ms
    // that check (b) sums): window levels, relative to their own group, cannot see it.
    let mut s = fake();
    s.faults.slow_group = Some((Category::MoeGateUp, 1.5));
    let r = run(&mut s);
    let gu = r.category(Category::MoeGateUp).unwrap();
    // The raw increments are 1.5x: without the plain reference, (b) would sum
    // 19.11 + 0.5 x 6.03 = 22.1 ms (+16%, over the 10% tolerance).
    let raw = median(&gu.group.paired_ms(0, 1)).unwrap();
    assert!(close(raw, 1.5 * 6.03), "raw {raw}");
    assert!(close(gu.level, 1.5), "level {}", gu.level);
    assert!(close(gu.increment.median_ms, 6.03));
    assert!(close(gu.baseline.median_ms, 18.75 + 0.03));
    for c in &r.categories {
        if c.category != Category::MoeGateUp {
            assert!(close(c.level, 1.0), "{}: level {}", c.category, c.level);
        }
    }
    assert!(close(r.sum_of_increments_ms, 19.11));
    assert!(r.validations.sum_of_parts.pass, "{:?}", r.problems);
    assert!(r.trusted, "{:?}", r.problems);

    // A record without the reference run (made before it existed) keeps level 1, and then
    // (b) fails as it did: the check can fail.
    let mut old = r.clone();
    for c in &mut old.categories {
        let keep: Vec<usize> = (0..c.group.series.len())
            .filter(|&i| c.group.series[i].label != "plain")
            .collect();
        c.group = c.group.select(&keep);
    }
    let again = old.reanalysed(&cfg()).unwrap();
    let gu = again.category(Category::MoeGateUp).unwrap();
    assert!(close(gu.level, 1.0));
    assert!(!again.validations.sum_of_parts.pass);
    assert!(
        again
            .problems
            .iter()
            .any(|p| matches!(p, ReplayProblem::SumOfParts { .. }))
    );
}

/// A fixed cost of entering replay (2 ms a run) is no reason to call replays non-linear: the
/// fit measures every count from the first replay. Over the observe run (base 0, the method
/// before) the same replays have a 2 ms intercept and fail.
#[test]
fn linearity_is_measured_from_the_first_replay() {
    let mut s = fake();
    s.costs.replay_entry_ms = 2.0; // a third of dense's 6.12 ms slope: fails over observe
    let c = ReplayConfig {
        linearity_category: Some(Category::DenseProj),
        tolerance_ratio: 0.5, // the categories' increments carry the entry cost (a), (b)
        ..cfg()
    };
    let g = s.graph.clone();
    let r = replay(&mut s, &g, &c).unwrap();
    let lin = &r.validations.linearity;
    assert!(lin.pass, "{:?}", r.problems);
    assert_eq!(lin.base_replays, 1);
    let fit = lin.fit.as_ref().unwrap();
    assert!(close(fit.slope_ms, 6.12) && fit.intercept_ms.abs() < 1e-9);
    let old = linearity_check(
        Category::DenseProj,
        &[1, 2, 4],
        0,
        &[8.12, 14.24, 26.48],
        0.98,
        0.1,
    );
    assert!(!old.pass && close(old.fit.unwrap().intercept_ms, 2.0));
}
