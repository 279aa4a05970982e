//! Building the ledger from two measurements.

use super::*;
use crate::deadwork::DeadWorkReport;
use crate::graph::CategoryCount;
use crate::opbench::CategoryStandalone;
use crate::replay::CategoryReplay;

/// Everything one side knows about one category.
struct Known<'a> {
    count: CategoryCount,
    in_graph: Option<&'a CategoryReplay>,
    in_graph_usable: bool,
    standalone: Option<&'a CategoryStandalone>,
    standalone_usable: bool,
}

fn known<'a>(m: &'a Measurement, c: Category, cfg: &LedgerConfig) -> Known<'a> {
    let in_graph = m.replay.as_ref().and_then(|r| r.category(c));
    let replay_trusted = m.replay.as_ref().is_some_and(|r| r.trusted);
    let standalone = m.opbench.as_ref().and_then(|o| o.category(c));
    Known {
        count: m.graph.category(c),
        in_graph_usable: in_graph
            .is_some_and(|r| r.trusted && (replay_trusted || cfg.allow_untrusted_replay)),
        in_graph,
        standalone_usable: standalone.is_some_and(|s| s.untimed_nodes == 0),
        standalone,
    }
}

impl Known<'_> {
    fn absent(&self) -> bool {
        self.count.nodes == 0
    }

    fn figure(&self, source: FigureSource, min_samples: usize) -> Figure {
        match source {
            FigureSource::InGraph => {
                let r = self.in_graph.map(|r| &r.increment);
                Figure {
                    value_ms: r.map_or(0.0, |s| s.median_ms),
                    spread_ms: r.map_or(0.0, |s| s.iqr_ms),
                    samples: r.map_or(0, |s| s.n),
                }
            }
            FigureSource::Standalone => {
                let s = self.standalone;
                Figure {
                    value_ms: s.map_or(0.0, |s| s.ms),
                    spread_ms: s.map_or(0.0, |s| s.spread_ms),
                    samples: s.map_or(0, |s| s.samples),
                }
            }
            // No work on this side: exactly 0, as certain as the gate requires.
            FigureSource::Absent => Figure {
                value_ms: 0.0,
                spread_ms: 0.0,
                samples: min_samples,
            },
            FigureSource::Missing => Figure {
                value_ms: 0.0,
                spread_ms: 0.0,
                samples: 0,
            },
        }
    }

    fn best(&self) -> FigureSource {
        if self.absent() {
            FigureSource::Absent
        } else if self.in_graph_usable {
            FigureSource::InGraph
        } else if self.standalone_usable {
            FigureSource::Standalone
        } else {
            FigureSource::Missing
        }
    }
}

/// Both sides use in-graph figures when both have usable ones, else standalone when both have
/// them, else each its best (a mixed row).
fn choose(a: &Known<'_>, b: &Known<'_>) -> (RowMethod, FigureSource, FigureSource) {
    let pick = |k: &Known<'_>, want: FigureSource| {
        if k.absent() {
            Some(FigureSource::Absent)
        } else {
            let ok = match want {
                FigureSource::InGraph => k.in_graph_usable,
                _ => k.standalone_usable,
            };
            ok.then_some(want)
        }
    };
    for (method, want) in [
        (RowMethod::InGraph, FigureSource::InGraph),
        (RowMethod::Standalone, FigureSource::Standalone),
    ] {
        if let (Some(x), Some(y)) = (pick(a, want), pick(b, want)) {
            return (method, x, y);
        }
    }
    (RowMethod::Mixed, a.best(), b.best())
}

fn side(m: &Measurement, k: &Known<'_>, source: FigureSource, fig: &Figure) -> Side {
    let c = &k.count;
    let ms = fig.value_ms;
    let moved = c.bytes_read + c.bytes_written;
    let gbps_v = gbps(moved, ms);
    let tflops_v = tflops(c.flops, ms);
    let peak_gbps = m.machine.peak_gbps.filter(|&p| p > 0.0);
    let peak_tflops = m.machine.peak_tflops.filter(|&p| p > 0.0);
    Side {
        ms,
        spread_ms: fig.spread_ms,
        samples: fig.samples,
        source,
        in_graph_ms: k.in_graph.map(|r| r.increment.median_ms),
        in_graph_trusted: k.in_graph_usable,
        standalone_ms: k.standalone.map(|s| s.ms),
        standalone_first_k_ms: k.standalone.and_then(|s| s.first_k_ms),
        share_ratio: 0.0,
        nodes: c.nodes,
        bytes_read: c.bytes_read,
        bytes_written: c.bytes_written,
        gbps: gbps_v,
        gbps_of_peak_ratio: gbps_v.zip(peak_gbps).map(|(g, p)| g / p),
        weight_bytes: c.weight_bytes,
        weight_params: c.weight_params,
        bits_per_weight: bits_per_weight(c.weight_bytes, c.weight_params),
        flops: c.flops,
        tflops: tflops_v,
        tflops_of_peak_ratio: tflops_v.zip(peak_tflops).map(|(t, p)| t / p),
        roofline: roofline(moved, c.flops, peak_gbps, peak_tflops),
        top_kernel: k.standalone.and_then(|s| s.top_op.clone()),
        wasted_flops: m
            .dead_work
            .by_category
            .iter()
            .find(|w| w.category == c.category)
            .map_or(0, |w| w.wasted_flops),
    }
}

fn row_verdict(v: Verdict) -> RowVerdict {
    match v {
        Verdict::Slower => RowVerdict::Attack,
        Verdict::Faster | Verdict::Even => RowVerdict::LeaveAlone,
        Verdict::NoVerdict => RowVerdict::NoVerdict,
    }
}

fn label(e: &EngineInfo) -> String {
    format!("{}@{} ({})", e.engine, e.version, e.backend)
}

fn examples(d: &DeadWorkReport) -> Vec<String> {
    d.dead
        .iter()
        .map(|w| format!("{} (dead)", w.name))
        .chain(d.partial.iter().map(|w| {
            format!(
                "{} ({} of {} rows needed)",
                w.name,
                w.rows_needed,
                w.rows_computed.unwrap_or(1)
            )
        }))
        .take(8)
        .collect()
}

fn summary(m: &Measurement, category_sum_ms: f64) -> SideSummary {
    let ob = m.opbench.as_ref();
    let cov = ob.and_then(|o| o.coverage.as_ref());
    let rp = m.replay.as_ref();
    let d = &m.dead_work;
    SideSummary {
        label: label(&m.engine),
        engine: m.engine.clone(),
        machine: m.machine.clone(),
        e2e_prefill_ms: m.e2e.prefill.stats.median_ms,
        e2e_prefill_spread_ms: m.e2e.prefill.stats.iqr_ms,
        prefill_tok_s: m.e2e.prefill_tok_s,
        decode_tok_s: m.e2e.decode.as_ref().and_then(|d| d.tok_s),
        category_sum_ms,
        standalone_coverage_ratio: cov.map(|c| c.coverage_ratio),
        standalone_first_k_coverage_ratio: cov.and_then(|c| c.first_k_coverage_ratio),
        in_graph_sum_ms: rp.map(|r| r.sum_of_increments_ms),
        observe_all_ms: rp.map(|r| r.observe_all.median_ms),
        outside_nodes_ms: rp.and_then(|r| r.observation.outside_nodes_ms),
        in_graph_coverage_ratio: rp.and_then(|r| {
            let node_ms = r.observation.node_time_ms();
            (node_ms > 0.0).then(|| r.sum_of_increments_ms / node_ms)
        }),
        observation_cost_ms: rp.map(|r| r.observation.cost_ms),
        observation_cost_ratio: rp.and_then(|r| r.observation.cost_ratio),
        replay_trusted: rp.map(|r| r.trusted),
        replay_problems: rp.map_or_else(Vec::new, |r| {
            r.problems.iter().map(ToString::to_string).collect()
        }),
        graph_ok: m.graph.ok(),
        graph_issues: m.graph.issues.iter().map(ToString::to_string).collect(),
        probe: m.probe.clone(),
        dead_nodes: d.dead.len() as u64,
        partial_nodes: d.partial.len() as u64,
        dead_work_examples: examples(d),
        wasted_flops: d.wasted_flops,
        wasted_flops_ratio: d.wasted_flops_ratio(),
        wasted_bytes: d.wasted_bytes,
        wasted_bytes_ratio: d.wasted_bytes_ratio(),
        gate_discards: m.e2e.prefill.group.discards()
            + m.e2e
                .decode
                .as_ref()
                .map_or(0, |d| d.series.group.discards())
            + ob.map_or(0, |o| o.discards)
            + rp.map_or(0, |r| r.discards),
        gate_level_range: rp.and_then(|r| {
            // A category group's window levels are relative to that group; its own level
            // (against the all-categories group's plain reference) puts them on one scale.
            let levels: Vec<f64> = std::iter::once(&r.all_group)
                .chain(std::iter::once(&r.linearity_group))
                .flat_map(|g| g.levels())
                .chain(
                    r.categories
                        .iter()
                        .flat_map(|c| c.group.levels().into_iter().map(move |l| l * c.level)),
                )
                .collect();
            let lo = levels.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = levels.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo.is_finite() && hi.is_finite() && (lo < 0.98 || hi > 1.02)).then_some((lo, hi))
        }),
        gate_exhausted: m.e2e.prefill.group.exhausted
            || ob.is_some_and(|o| o.exhausted)
            || rp.is_some_and(|r| {
                r.problems
                    .iter()
                    .any(|p| matches!(p, crate::replay::ReplayProblem::GateExhausted { .. }))
            }),
    }
}

/// A side's rate exceeds the measured bandwidth or matrix peak.
pub(crate) fn over_peak(s: &Side) -> bool {
    s.gbps_of_peak_ratio.is_some_and(|x| x > 1.0) || s.tflops_of_peak_ratio.is_some_and(|x| x > 1.0)
}

/// The share of equal (layer, token) expert sets below which two engines' routings of one
/// prompt are said to differ (near-ties flip a few sets: f16 and f32 roundings of the router).
pub(crate) const ROUTING_AGREEMENT_MIN: f64 = 0.95;

fn warnings(
    a: &Measurement,
    b: &Measurement,
    sa: &SideSummary,
    sb: &SideSummary,
    rows: &[LedgerRow],
) -> Vec<String> {
    let mut w = Vec::new();
    if a.n_tokens != b.n_tokens {
        w.push(format!(
            "prompt lengths differ (A {} tokens, B {}): rows are not comparable",
            a.n_tokens, b.n_tokens
        ));
    }
    if a.n_past != b.n_past {
        w.push(format!(
            "depths differ (A after {} context tokens, B after {}): rows are not comparable",
            a.n_past, b.n_past
        ));
    }
    if a.machine.hostname != b.machine.hostname
        || a.machine.gpu.as_ref().map(|g| &g.name) != b.machine.gpu.as_ref().map(|g| &g.name)
    {
        w.push("A and B were measured on different machines".into());
    }
    for (name, s) in [("A", sa), ("B", sb)] {
        if s.replay_trusted == Some(false) {
            w.push(format!(
                "{name} ({}) in-graph replay is UNTRUSTED: {}",
                s.label,
                s.replay_problems.join("; ")
            ));
        }
        if !s.graph_ok {
            w.push(format!(
                "{name} graph checks failed: {}",
                s.graph_issues.join("; ")
            ));
        }
        if !s.probe.complete {
            w.push(format!(
                "{name} probe incomplete: {} of {} runs did not dispatch the graph's {} work nodes",
                s.probe.mismatched_runs, s.probe.runs_checked, s.probe.work_nodes
            ));
        }
        if s.gate_exhausted {
            w.push(format!(
                "{name} noise gate ran out of retries: some figures come from a busy or noisy machine"
            ));
        }
    }
    // Both sides' standalone MoE ops were fed one engine's routing: fair only where the other
    // engine's own router agrees (near-ties aside).
    let mut seen = Vec::new();
    for m in [a, b] {
        for g in m.opbench.iter().flat_map(|o| &o.routing_agreement) {
            if g.equal_share() < ROUTING_AGREEMENT_MIN && !seen.contains(&(&g.a, &g.b)) {
                seen.push((&g.a, &g.b));
                if g.sets == 0 {
                    w.push(format!(
                        "{}'s own routing of the prompt could not be compared with {}'s (the \
                         table both engines' standalone MoE ops were fed): no layer with the \
                         same experts per token and token count",
                        g.b, g.a
                    ));
                    continue;
                }
                w.push(format!(
                    "{}'s own routing of the prompt differs from {}'s (the table both engines' \
                     standalone MoE ops were fed) in {} of {} token expert sets: the standalone \
                     MoE rows compare the engines on a routing one of them does not choose",
                    g.b,
                    g.a,
                    g.sets - g.equal_sets,
                    g.sets
                ));
            }
        }
    }
    // A rate above the measured ceiling means the ceiling is wrong, not that the code beats it.
    for (name, over) in [
        (
            "A",
            rows.iter().filter(|r| over_peak(&r.a)).collect::<Vec<_>>(),
        ),
        (
            "B",
            rows.iter().filter(|r| over_peak(&r.b)).collect::<Vec<_>>(),
        ),
    ] {
        if !over.is_empty() {
            let cats: Vec<&str> = over.iter().map(|r| r.category.name()).collect();
            w.push(format!(
                "{name} runs above its machine's measured peak in {} (marked >100%!): the peak \
                 is wrong (re-measure with `tally machine`), so floors and utilisations are not \
                 meaningful",
                cats.join(", ")
            ));
        }
    }
    let mixed: Vec<&str> = rows
        .iter()
        .filter(|r| r.method == RowMethod::Mixed)
        .map(|r| r.category.name())
        .collect();
    if !mixed.is_empty() {
        w.push(format!(
            "rows measured with different methods on the two sides: {}",
            mixed.join(", ")
        ));
    }
    w
}

/// Why the ledger's verdicts cannot all be trusted: one line per failed validation or exhausted
/// noise gate, on either side. Empty when every check passed.
pub(crate) fn withheld_reasons(sa: &SideSummary, sb: &SideSummary) -> Vec<String> {
    let mut v = Vec::new();
    for (name, s) in [("A", sa), ("B", sb)] {
        if s.replay_trusted == Some(false) {
            v.push(format!(
                "{name} ({}) in-graph replay failed its validations",
                s.label
            ));
        }
        if s.gate_exhausted {
            v.push(format!(
                "{name} ({}) noise gate ran out of retries",
                s.label
            ));
        }
        if !s.graph_ok {
            v.push(format!("{name} ({}) graph checks failed", s.label));
        }
        if !s.probe.complete {
            v.push(format!("{name} ({}) probes incomplete", s.label));
        }
    }
    v
}

/// Whether a row's verdict rests on something that failed: a side whose gate ran out of
/// retries or whose graph/probe checks failed taints every row; an untrusted replay taints the
/// rows that still use that side's in-graph figure.
fn row_affected(r: &LedgerRow, sa: &SideSummary, sb: &SideSummary) -> bool {
    [(sa, &r.a), (sb, &r.b)].into_iter().any(|(s, side)| {
        s.gate_exhausted
            || !s.graph_ok
            || !s.probe.complete
            || (s.replay_trusted == Some(false) && side.source == FigureSource::InGraph)
    })
}

/// Builds the ledger of `a` (ours) against `b` (peer).
pub fn build_ledger_with(a: &Measurement, b: &Measurement, cfg: &LedgerConfig) -> Ledger {
    let mut rows = Vec::new();
    for c in Category::ALL {
        let (ka, kb) = (known(a, c, cfg), known(b, c, cfg));
        if ka.absent() && kb.absent() {
            continue;
        }
        let (method, sa, sb) = choose(&ka, &kb);
        let (fa, fb) = (
            ka.figure(sa, cfg.min_samples),
            kb.figure(sb, cfg.min_samples),
        );
        let comparison = compare(&fa, &fb, cfg.min_samples);
        let verdict = if sa == FigureSource::Missing || sb == FigureSource::Missing {
            RowVerdict::NoVerdict
        } else {
            row_verdict(comparison.verdict)
        };
        let side_a = side(a, &ka, sa, &fa);
        let side_b = side(b, &kb, sb, &fb);
        rows.push(LedgerRow {
            category: c,
            method,
            gap_ms: comparison.effect_ms,
            byte_check: byte_check(&side_a, &side_b, verdict, cfg.byte_same_ratio),
            kernel_check: kernel_check(&side_a, &side_b, cfg.kernel_even_ratio),
            a: side_a,
            b: side_b,
            comparison,
            verdict,
        });
    }
    let a_ms: f64 = rows.iter().map(|r| r.a.ms).sum();
    let b_ms: f64 = rows.iter().map(|r| r.b.ms).sum();
    for r in &mut rows {
        r.a.share_ratio = if a_ms > 0.0 { r.a.ms / a_ms } else { 0.0 };
        r.b.share_ratio = if b_ms > 0.0 { r.b.ms / b_ms } else { 0.0 };
    }
    // Largest gap first; ties keep report order (the sort is stable).
    rows.sort_by(|x, y| y.gap_ms.total_cmp(&x.gap_ms));
    let e2e_fig = |m: &Measurement| Figure {
        value_ms: m.e2e.prefill.stats.median_ms,
        spread_ms: m.e2e.prefill.stats.iqr_ms,
        samples: m.e2e.prefill.stats.n,
    };
    let sa = summary(a, a_ms);
    let sb = summary(b, b_ms);
    let mut notes = Vec::new();
    if rows.iter().any(|r| r.method != RowMethod::Standalone) {
        notes.push(UPPER_BOUND_NOTE.to_string());
    }
    for (name, m) in [("A", a), ("B", b)] {
        if let Some(o) = &m.opbench {
            let recorded = o
                .routing_tables
                .iter()
                .find_map(|t| Some((t.recorded_by.as_ref()?, t.layer?)))
                .map_or_else(String::new, |(by, layer)| {
                    format!(" (recorded by {by}; each op with its layers' median table, e.g. layer {layer})")
                });
            notes.push(format!(
                "{name} standalone routed (MoE) ops timed with {} routing{recorded}{}",
                o.routing.name(),
                if o.first_k_ops.is_empty() {
                    ""
                } else {
                    "; first-k figures shown beside them"
                }
            ));
        }
    }
    // The cross-check of the recorded routing (the same in both measurements when measured
    // together: shown once).
    let mut shown = Vec::new();
    for g in [a, b]
        .into_iter()
        .filter_map(|m| m.opbench.as_ref())
        .flat_map(|o| &o.routing_agreement)
    {
        if !shown.contains(&g) {
            shown.push(g);
            notes.push(format!(
                "routing agreement: {}'s own router chose the same experts as {}'s in {} of {} \
                 token sets ({:.2}%) over {} MoE layers",
                g.b,
                g.a,
                g.equal_sets,
                g.sets,
                100.0 * g.equal_share(),
                g.layers
            ));
        }
    }
    for (name, m) in [("A", a), ("B", b)] {
        if let Some(n) = m.noise.as_ref().map(|n| n.best_of).filter(|&n| n > 1) {
            notes.push(format!(
                "{name} timings: each sample is the fastest of {n} back-to-back runs (--best-of)"
            ));
        }
    }
    notes.push(
        "standalone and in-graph columns are shown for both sides: a coverage near 100% can hide \
         errors of opposite sign"
            .into(),
    );
    let mut e2e = compare(&e2e_fig(a), &e2e_fig(b), cfg.min_samples);
    // A failed validation or an exhausted noise gate withholds the verdicts it touches: the
    // headline always, and each row whose figures come from the affected side and method.
    if !withheld_reasons(&sa, &sb).is_empty() {
        e2e.verdict = crate::noise::Verdict::NoVerdict;
        for r in &mut rows {
            if row_affected(r, &sa, &sb) {
                r.verdict = RowVerdict::NoVerdict;
            }
        }
    }
    Ledger {
        schema: SCHEMA_VERSION,
        n_tokens: a.n_tokens,
        n_past: a.n_past,
        warnings: warnings(a, b, &sa, &sb, &rows),
        totals: Totals {
            a_ms,
            b_ms,
            gap_ms: a_ms - b_ms,
            e2e,
        },
        a: sa,
        b: sb,
        rows,
        notes,
        config: cfg.clone(),
    }
}
