use std::collections::BTreeMap;

use super::*;
use crate::category::Category;
use crate::fake::{FakeCosts, FakeSubject, ToyGraph, toy_graph};
use crate::ledger::build_ledger;
use crate::measure::{MeasureConfig, Measurement, measure_pair};
use crate::noise::ProbeChoice;
use crate::schema::MachineInfo;

fn pair(peer_nonlinear: bool) -> (Measurement, Measurement) {
    let node_ms: BTreeMap<Category, f64> = [
        (Category::Norm, 0.1),
        (Category::DenseProj, 0.5),
        (Category::Layout, 0.3),
        (Category::MoeGateUp, 2.0),
        (Category::MoeDown, 1.0),
    ]
    .into_iter()
    .collect();
    let costs = FakeCosts {
        node_ms,
        ..FakeCosts::default()
    };
    let mut a = FakeSubject::new(toy_graph(&ToyGraph::default()), costs.clone());
    let mut b = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "peer <&>".into(),
            ..ToyGraph::default()
        }),
        costs,
    );
    b.costs.node_ms.insert(Category::DenseProj, 0.25);
    if peer_nonlinear {
        b.faults.replay_power = 2.0;
    }
    let mut cfg = MeasureConfig::new(
        8,
        MachineInfo {
            peak_gbps: Some(1000.0),
            peak_tflops: Some(100.0),
            ..MachineInfo::default()
        },
    );
    cfg.noise.probe = ProbeChoice::Off;
    if let Some(o) = cfg.opbench.as_mut() {
        o.first_k = true;
    }
    measure_pair(&mut a, &mut b, &cfg).unwrap()
}

#[test]
fn svg_is_xml_and_names_every_category() {
    let (a, b) = pair(false);
    let l = build_ledger(&a, &b);
    let svg = render_svg(&l);
    let doc = roxmltree::Document::parse(&svg).expect("valid XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let text: String = doc
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!l.rows.is_empty());
    for r in &l.rows {
        assert!(
            text.contains(r.category.label()),
            "{} missing",
            r.category.label()
        );
    }
    assert!(
        text.contains("peer <&>"),
        "escaped engine name survives parsing"
    );
    let bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("height") == Some("13"))
        .count();
    assert_eq!(bars, 2 * l.rows.len());
}

#[test]
fn terminal_and_markdown_carry_rows_units_and_verdicts() {
    let (a, b) = pair(false);
    let l = build_ledger(&a, &b);
    let t = render_terminal(&l);
    for h in [
        "A ms",
        "B ms",
        "gap ms",
        "A GB/s",
        "A bits/weight",
        "A TFLOP/s",
        "A floor ms",
    ] {
        assert!(t.contains(h), "header {h}");
    }
    assert!(t.contains("attack") && t.contains("leave alone"));
    assert!(t.contains("Dense projections"));
    assert!(t.contains("upper bound"));
    assert!(t.contains("A replay: trusted"));
    assert!(t.contains("A dead work: 0 dead, 8 partially dead nodes"));
    // The fakes spend no time outside their nodes: the coverage line and each measurement's
    // replay section say what the checks compared with.
    assert!(
        t.contains("in-graph 100.0% of the observe-all run's ")
            && t.contains(" ms inside its nodes (0.000 ms outside them"),
        "{t}"
    );
    let m = render_measurement(&a);
    assert!(m.contains("outside them 0.000 ms"), "{m}");
    assert!(m.contains(
        "all categories at once: their replays vs the nodes they repeat, in the same runs"
    ));
    let md = render_markdown(&l);
    assert!(
        md.starts_with("# Ledger pp8: A = toy@0.0.0-fake (cpu) vs B = peer <&>@0.0.0-fake (cpu)")
    );
    assert!(md.contains("| category | method | A ms | B ms | gap ms |"));
    assert!(md.contains("| Dense projections | in-graph | 6.000 | 3.000 | +3.000 |"));
}

#[test]
fn untrusted_replay_is_shown_in_every_text_report() {
    let (a, b) = pair(true);
    let l = build_ledger(&a, &b);
    for text in [render_terminal(&l), render_markdown(&l)] {
        assert!(text.contains("WARNINGS"));
        assert!(text.contains("B replay: UNTRUSTED: (c) replays of"));
        assert!(text.contains("in-graph replay is UNTRUSTED"));
        // Untrusted in-graph figures carry a star.
        assert!(text.contains("3.000*"));
    }
    let m = render_measurement(&b);
    assert!(m.contains("Replay: UNTRUSTED"));
    assert!(m.contains("(c) linearity of moe_gate_up"));
    assert!(m.contains("FAIL"));
}

#[test]
fn json_round_trips() {
    let (a, b) = pair(false);
    let l = build_ledger(&a, &b);
    let json = render_json(&l).unwrap();
    let back: crate::ledger::Ledger = serde_json::from_str(&json).unwrap();
    assert_eq!(back, l);
}

#[test]
fn graph_and_dead_work_reports() {
    let (a, _) = pair(false);
    let g = render_graph_report(&a.graph);
    assert!(g.contains("routed-expert gate/up matmuls"));
    assert!(g.contains("3 layers x 1 (fused gate/up)"));
    assert!(g.contains("Graph check: PASS"));
    let mut bad = toy_graph(&ToyGraph::default());
    bad.expected[0].expected = 13;
    let r = render_graph_report(&crate::graph::check_graph(&bad));
    assert!(r.contains("MISMATCH"));
    assert!(r.contains(
        "ERROR: dense projections: expected 13 (3 layers x 4 (q, k, v, o)), found 12 in the graph"
    ));
    assert!(r.contains("Graph check: FAIL"));
    let d = render_dead_work(&a.dead_work);
    assert!(d.contains("blk.2.moe_gate_up"));
    assert!(d.contains("8 partially dead"));
    let m = render_measurement(&a);
    assert!(m.contains("first-k"));
    assert!(m.contains("Routing realistic: 8 tokens x top-2"));
    assert!(m.contains("Replay: trusted"));
}

/// Both sides measured on a one-token step after `depth` context tokens.
fn step_pair(depth: u64) -> (Measurement, Measurement) {
    let costs = FakeCosts {
        node_ms: [(Category::DenseProj, 0.5), (Category::Attention, 0.2)]
            .into_iter()
            .collect(),
        ..FakeCosts::default()
    };
    let toy = |engine: &str| ToyGraph {
        engine: engine.into(),
        n_tokens: 1,
        n_past: depth,
        ..ToyGraph::default()
    };
    let mut a = FakeSubject::new(toy_graph(&toy("toy")), costs.clone());
    let mut b = FakeSubject::new(toy_graph(&toy("peer")), costs);
    b.costs.node_ms.insert(Category::DenseProj, 0.25);
    let mut cfg = MeasureConfig::for_workload(
        crate::subject::Workload::step_at(depth as usize),
        MachineInfo::default(),
    );
    cfg.noise.probe = ProbeChoice::Off;
    measure_pair(&mut a, &mut b, &cfg).unwrap()
}

#[test]
fn a_decode_step_ledger_names_its_depth_everywhere() {
    let (a, b) = step_pair(16);
    let l = build_ledger(&a, &b);
    assert_eq!((l.n_tokens, l.n_past), (1, 16));
    assert_eq!(l.workload().label(), "step-d16");
    let md = render_markdown(&l);
    assert!(
        md.starts_with("# Ledger step-d16 (decode step at depth 16): A = toy@"),
        "{md}"
    );
    assert!(
        headline(&l).contains("end to end (decode step at depth 16: A "),
        "{}",
        headline(&l)
    );
    assert!(md.contains("End-to-end step: A "), "{md}");
    assert!(md.contains("A = toy@0.0.0-fake (cpu): step "), "{md}");
    let t = render_terminal(&l);
    assert!(t.contains("A replay: trusted"), "{t}");
    let svg = render_svg(&l);
    assert!(svg.contains("Ledger step-d16 (decode step at depth 16): time per category"));
    // A prefill ledger keeps its old names.
    let (a, b) = pair(false);
    let l = build_ledger(&a, &b);
    assert_eq!(l.n_past, 0);
    assert!(headline(&l).contains("end to end (prefill A "));
    assert!(render_svg(&l).contains("Ledger pp8: time per category"));
    // Two depths side by side are flagged.
    let (a, _) = step_pair(16);
    let (_, b) = step_pair(32);
    let l = build_ledger(&a, &b);
    assert!(
        l.warnings
            .iter()
            .any(|w| w.starts_with("depths differ (A after 16")),
        "{:?}",
        l.warnings
    );
}
