use std::collections::BTreeMap;

use super::*;
use crate::fake::{FakeCosts, FakeSubject, ToyGraph, toy_graph};
use crate::measure::{MeasureConfig, measure_pair};
use crate::noise::ProbeChoice;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

fn costs(dense_ms: f64, gate_up_ms: f64) -> FakeCosts {
    let node_ms: BTreeMap<Category, f64> = [
        (Category::Embedding, 0.2),
        (Category::Norm, 0.1),
        (Category::DenseProj, dense_ms),
        (Category::Layout, 0.3),
        (Category::Attention, 0.4),
        (Category::Elementwise, 0.05),
        (Category::Router, 0.1),
        (Category::MoeGateUp, gate_up_ms),
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

/// The write-up's situation in miniature: ours reads 4.5-bit dense weights and is slower on
/// dense projections; the peer reads 8.5-bit ones, is faster in-graph, but its dense kernel
/// alone is exactly as fast as ours; ours is faster on MoE gate/up.
fn subjects() -> (FakeSubject, FakeSubject) {
    let a = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "tally".into(),
            ..ToyGraph::default()
        }),
        costs(0.5, 2.0),
    );
    let mut b = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "llama.cpp".into(),
            dense_quant: ("q8_0", 32, 34),
            ..ToyGraph::default()
        }),
        costs(0.25, 2.5),
    );
    b.costs.standalone_ratio.insert(Category::DenseProj, 2.0);
    (a, b)
}

fn config() -> MeasureConfig {
    let mut cfg = MeasureConfig::new(
        8,
        MachineInfo {
            hostname: "h".into(),
            peak_gbps: Some(1000.0),
            peak_tflops: Some(100.0),
            ..MachineInfo::default()
        },
    );
    cfg.noise.probe = ProbeChoice::Off;
    cfg
}

fn measured(a: &mut FakeSubject, b: &mut FakeSubject) -> (Measurement, Measurement) {
    measure_pair(a, b, &config()).unwrap()
}

fn row(l: &Ledger, c: Category) -> &LedgerRow {
    l.rows.iter().find(|r| r.category == c).unwrap()
}

#[test]
fn rows_figures_and_checks_by_hand() {
    let (mut a, mut b) = subjects();
    let (ma, mb) = measured(&mut a, &mut b);
    let l = build_ledger(&ma, &mb);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    // Sorted by gap: dense (+3.0) first, gate/up (-1.5) last, the even rows between.
    assert_eq!(l.rows.first().unwrap().category, Category::DenseProj);
    assert_eq!(l.rows.last().unwrap().category, Category::MoeGateUp);
    assert_eq!(l.rows.len(), 10);
    let d = row(&l, Category::DenseProj);
    assert_eq!(d.method, RowMethod::InGraph);
    // In-graph: 12 nodes x 0.5 + 12 x 0.01 barrier = 6.12; peer 12 x 0.25 + 0.12 = 3.12.
    assert!(close(d.a.ms, 6.12) && close(d.b.ms, 3.12) && close(d.gap_ms, 3.0));
    assert_eq!(d.verdict, RowVerdict::Attack);
    assert_eq!(
        (d.a.source, d.b.source),
        (FigureSource::InGraph, FigureSource::InGraph)
    );
    // Standalone: ours 12 x 0.5 = 6; the peer's kernel alone is 2 x slower than in-graph: 6.
    assert_eq!(
        (d.a.standalone_ms, d.b.standalone_ms),
        (Some(6.0), Some(6.0))
    );
    // Bits per weight: q4_k 144 bytes per 256 = 4.5; q8_0 34 per 32 = 8.5.
    assert_eq!(
        (d.a.bits_per_weight, d.b.bits_per_weight),
        (Some(4.5), Some(8.5))
    );
    // Bytes read: 12 x (weights + 8x64x4 activations): 12 x (2304 + 2048) vs 12 x (4352 + 2048).
    assert_eq!((d.a.bytes_read, d.b.bytes_read), (52_224, 76_800));
    assert_eq!(d.byte_check.verdict, ByteVerdict::FewerBytesButSlower);
    assert!(close(d.byte_check.byte_ratio.unwrap(), 0.68));
    assert!(close(
        d.byte_check.bandwidth_bound_a_ms.unwrap(),
        3.12 * 0.68
    ));
    assert_eq!(
        d.byte_check.verdict.message(),
        "fewer bytes but slower: not bandwidth-bound, look at compute/dequant"
    );
    // Biggest kernel: 2x8x64x64 FLOPs in 0.5 ms on both sides: even.
    assert_eq!(d.kernel_check.verdict, KernelVerdict::Even);
    assert!(close(
        d.kernel_check.a_tflops.unwrap(),
        65_536.0 / 0.5 / 1e9
    ));
    // GB/s: (52224 + 12 x 2048) bytes in 6.12 ms; floor at 1000 GB/s and 100 TFLOP/s.
    assert!(close(d.a.gbps.unwrap(), 76_800.0 / 6.12 / 1e6));
    assert!(close(
        d.a.gbps_of_peak_ratio.unwrap(),
        76_800.0 / 6.12 / 1e6 / 1000.0
    ));
    assert!(close(d.a.tflops.unwrap(), 12.0 * 65_536.0 / 6.12 / 1e9));
    assert!(close(d.a.roofline.bytes_floor_ms.unwrap(), 76_800.0 / 1e9));
    assert!(close(
        d.a.roofline.flops_floor_ms.unwrap(),
        786_432.0 / 1e11
    ));
    assert_eq!(d.a.roofline.floor_ms, d.a.roofline.bytes_floor_ms);
    // Dead work of the last layer's two dense nodes (q, o: 7/8 of 65536 FLOPs each).
    assert_eq!(d.a.wasted_flops, 2 * 57_344);

    let gu = row(&l, Category::MoeGateUp);
    assert!(close(gu.a.ms, 6.03) && close(gu.b.ms, 7.53));
    assert_eq!(gu.verdict, RowVerdict::LeaveAlone);
    assert_eq!(gu.byte_check.verdict, ByteVerdict::NotSlower);
    let norm = row(&l, Category::Norm);
    assert_eq!(
        (norm.comparison.verdict, norm.verdict),
        (Verdict::Even, RowVerdict::LeaveAlone)
    );

    // Totals and shares.
    assert!(close(l.totals.a_ms, 19.11));
    assert!(close(l.totals.b_ms, 19.11 - 3.0 + 1.5));
    assert!(close(d.a.share_ratio, 6.12 / 19.11));
    let shares: f64 = l.rows.iter().map(|r| r.b.share_ratio).sum();
    assert!(close(shares, 1.0));
    assert_eq!(l.totals.e2e.verdict, Verdict::Slower);
    assert!(close(l.a.e2e_prefill_ms, 18.75) && close(l.b.e2e_prefill_ms, 17.25));
    assert!(close(l.a.in_graph_coverage_ratio.unwrap(), 1.0));
    assert!(close(l.a.standalone_coverage_ratio.unwrap(), 18.75 / 18.75));
    assert_eq!(l.a.replay_trusted, Some(true));
    assert_eq!(l.a.partial_nodes, 8);
    assert!(l.a.dead_work_examples[0].starts_with("blk.2.attn_q (1 of 8 rows needed)"));
    assert!(l.notes.iter().any(|n| n.contains("upper bound")));
}

#[test]
fn untrusted_replay_falls_back_to_standalone_on_both_sides() {
    let (mut a, mut b) = subjects();
    b.faults.replay_power = 2.0;
    let (ma, mb) = measured(&mut a, &mut b);
    let l = build_ledger(&ma, &mb);
    assert_eq!(l.b.replay_trusted, Some(false));
    assert!(l.rows.iter().all(|r| r.method == RowMethod::Standalone));
    let d = row(&l, Category::DenseProj);
    // Standalone both 6.0: even, so nothing to attack by this method; in-graph still shown.
    assert_eq!(
        (d.a.ms, d.b.ms, d.verdict),
        (6.0, 6.0, RowVerdict::LeaveAlone)
    );
    assert!(close(d.b.in_graph_ms.unwrap(), 3.12));
    assert!(!d.b.in_graph_trusted);
    assert!(
        l.warnings.iter().any(|w| w.starts_with(
            "B (llama.cpp@0.0.0-fake (cpu)) in-graph replay is UNTRUSTED: (c) replays of"
        )),
        "{:?}",
        l.warnings
    );
    // A failed validation withholds the headline, in every report, the SVG included.
    assert_eq!(l.totals.e2e.verdict, Verdict::NoVerdict);
    assert_eq!(l.withheld().len(), 1, "{:?}", l.withheld());
    let text = crate::report::render_terminal(&l);
    assert!(
        text.contains("Verdict: NO VERDICT (B (llama.cpp@0.0.0-fake (cpu)) in-graph replay failed"),
        "{text}"
    );
    let svg = crate::report::render_svg(&l);
    assert!(
        svg.contains("Verdict: NO VERDICT") && svg.contains("WARNING: B (llama.cpp"),
        "{svg}"
    );
    assert!(svg.contains("category totals: A "), "{svg}");
    // Unless the reader accepts untrusted figures explicitly.
    let cfg = LedgerConfig {
        allow_untrusted_replay: true,
        ..LedgerConfig::default()
    };
    let l = build_ledger_with(&ma, &mb, &cfg);
    assert!(l.rows.iter().all(|r| r.method == RowMethod::InGraph));
    assert_eq!(l.b.replay_trusted, Some(false));
    // ...and then the rows resting on B's untrusted in-graph figure have no verdict.
    let tainted: Vec<_> = l
        .rows
        .iter()
        .filter(|r| r.b.source == FigureSource::InGraph)
        .collect();
    assert!(!tainted.is_empty());
    assert!(tainted.iter().all(|r| r.verdict == RowVerdict::NoVerdict));
}

#[test]
fn spread_larger_than_gap_gives_no_verdict() {
    let (mut a, mut b) = subjects();
    let (mut ma, mb) = measured(&mut a, &mut b);
    let r = ma.replay.as_mut().unwrap();
    let dense = r
        .categories
        .iter_mut()
        .find(|c| c.category == Category::DenseProj)
        .unwrap();
    dense.increment.iqr_ms = 3.5; // gap 3.0 <= 3.5
    let l = build_ledger(&ma, &mb);
    let d = row(&l, Category::DenseProj);
    assert_eq!(d.verdict, RowVerdict::NoVerdict);
    assert_eq!(d.comparison.noise_ms, 3.5);
    assert_eq!(d.byte_check.verdict, ByteVerdict::NotSlower);
}

#[test]
fn category_absent_on_the_peer_is_all_gap() {
    let (mut a, mut b) = subjects();
    let (ma, mut mb) = measured(&mut a, &mut b);
    mb.graph
        .categories
        .retain(|c| c.category != Category::Layout);
    mb.replay
        .as_mut()
        .unwrap()
        .categories
        .retain(|c| c.category != Category::Layout);
    mb.opbench
        .as_mut()
        .unwrap()
        .categories
        .retain(|c| c.category != Category::Layout);
    let l = build_ledger(&ma, &mb);
    let lay = row(&l, Category::Layout);
    assert_eq!(lay.method, RowMethod::InGraph);
    assert_eq!(lay.b.source, FigureSource::Absent);
    // 3 stores x 0.3 + 3 x 0.01 barrier.
    assert!(close(lay.gap_ms, 0.93));
    assert_eq!(lay.verdict, RowVerdict::Attack);
    assert_eq!(lay.byte_check.verdict, ByteVerdict::NoBytes);
    assert_eq!(l.rows[1].category, Category::Layout); // second largest gap after dense
}

#[test]
fn missing_figures_make_a_mixed_row_without_verdict() {
    let (mut a, mut b) = subjects();
    b.faults.replay_power = 2.0;
    let (ma, mut mb) = measured(&mut a, &mut b);
    mb.opbench = None;
    let l = build_ledger(&ma, &mb);
    let d = row(&l, Category::DenseProj);
    assert_eq!(d.method, RowMethod::Mixed);
    assert_eq!(
        (d.a.source, d.b.source),
        (FigureSource::InGraph, FigureSource::Missing)
    );
    assert_eq!(d.verdict, RowVerdict::NoVerdict);
    assert!(
        l.warnings
            .iter()
            .any(|w| w.starts_with("rows measured with different methods"))
    );
}

#[test]
fn pure_row_math_by_hand() {
    // The write-up's byte math: 4.5 vs 8.5 bits, peer 188.3 ms -> ~100 ms if bandwidth-bound.
    assert_eq!(bits_per_weight(144, 256), Some(4.5));
    assert_eq!(bits_per_weight(34, 32), Some(8.5));
    assert_eq!(bits_per_weight(10, 0), None);
    // 970 GFLOP in 155.9 ms = 6.22 TFLOP/s.
    assert!(close(
        tflops(970_000_000_000, 155.9).unwrap(),
        970.0 / 155.9
    ));
    // 21.16 GB at 4300 GB/s: 4.92 ms floor; 1.4 TFLOP at 790 TFLOP/s: 1.77 ms.
    let r = roofline(21_160_000_000, 1_400_000_000_000, Some(4300.0), Some(790.0));
    assert!(close(r.bytes_floor_ms.unwrap(), 21.16 / 4.3));
    assert!(close(r.flops_floor_ms.unwrap(), 1400.0 / 790.0));
    assert_eq!(r.floor_ms, r.bytes_floor_ms);
    let r = roofline(1, 1, None, Some(0.0));
    assert_eq!(
        (r.bytes_floor_ms, r.flops_floor_ms, r.floor_ms),
        (None, None, None)
    );
    assert_eq!(gbps(4_000_000, 2.0), Some(2.0));
    assert_eq!(gbps(0, 2.0), None);
}
