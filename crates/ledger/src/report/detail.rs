//! Plain-text reports of one engine's results: graph check, dead work, measurement summary.

use super::table::{Column, Table, left, right};
use super::{ms, opt, pct};
use crate::deadwork::DeadWorkReport;
use crate::graph::GraphReport;
use crate::ledger::bits_per_weight;
use crate::measure::Measurement;
use crate::replay::{ReplayReport, ToleranceCheck};

const GRAPH_CATS: [Column; 7] = [
    left("category"),
    right("nodes"),
    right("view nodes"),
    right("MB read"),
    right("MB written"),
    right("GFLOP"),
    right("bits/weight"),
];
const GRAPH_OPS: [Column; 3] = [left("op"), right("nodes"), right("view nodes")];
const EXPECTED: [Column; 5] = [
    left("what"),
    right("expected"),
    right("found"),
    left("derivation"),
    left("result"),
];
const WASTE: [Column; 7] = [
    left("node"),
    left("category"),
    right("layer"),
    right("rows computed"),
    right("rows needed"),
    right("wasted MB"),
    right("wasted GFLOP"),
];
const STANDALONE: [Column; 8] = [
    left("category"),
    right("nodes"),
    right("ms"),
    right("spread ms"),
    right("first-k ms"),
    right("first-k undercount ms"),
    left("biggest kernel"),
    right("kernel TFLOP/s"),
];
const REPLAY: [Column; 7] = [
    left("category"),
    right("nodes"),
    right("observe ms"),
    right("replay x1 ms"),
    right("increment ms"),
    right("increment IQR ms"),
    left("trusted"),
];

fn mb(b: u64) -> String {
    format!("{:.3}", b as f64 / 1e6)
}

/// A table as aligned text, or as a Markdown table set off by blank lines.
fn tbl(t: &Table, md: bool) -> String {
    if md {
        format!("\n{}\n", t.markdown().trim_end())
    } else {
        t.terminal()
    }
}

/// Markdown from the text layout: table lines stay together; every other line becomes its own
/// paragraph (Markdown joins adjacent lines), and list items (`  - `) become list items.
fn md_paragraphs(text: &str) -> String {
    let mut out = String::new();
    let mut prev_table = false;
    for line in text.lines() {
        let is_table = line.starts_with('|');
        if line.trim().is_empty() {
            continue;
        }
        if is_table {
            if !prev_table {
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
        } else {
            if prev_table {
                out.push('\n');
            }
            let l = line.trim_start();
            if l.starts_with("- ") {
                out.push_str(l);
                out.push('\n');
            } else {
                out.push_str(l);
                out.push_str("\n\n");
            }
        }
        prev_table = is_table;
    }
    out
}

fn gflop(f: u64) -> String {
    format!("{:.3}", f as f64 / 1e9)
}

/// The graph check: counts per category and op, the architecture cross-check (expected vs
/// found, with the derivation) and every error.
pub fn render_graph_report(r: &GraphReport) -> String {
    graph_report(r, false)
}

/// [`render_graph_report`] as Markdown.
pub fn render_graph_report_md(r: &GraphReport) -> String {
    md_paragraphs(&graph_report(r, true))
}

fn graph_report(r: &GraphReport, md: bool) -> String {
    let at = if r.n_past > 0 {
        format!(" at position {}", r.n_past)
    } else {
        String::new()
    };
    let mut out = format!(
        "Graph of {} for {} tokens{at}: {} nodes, {} view nodes (no work), {} work nodes, {} MB read, {} GFLOP\n\n",
        r.engine,
        r.n_tokens,
        r.nodes,
        r.view_nodes,
        r.work_nodes,
        mb(r.bytes_read),
        gflop(r.flops)
    );
    let mut t = Table::new(&GRAPH_CATS);
    for c in &r.categories {
        t.push(vec![
            c.category.label().into(),
            c.nodes.to_string(),
            c.view_nodes.to_string(),
            mb(c.bytes_read),
            mb(c.bytes_written),
            gflop(c.flops),
            opt(bits_per_weight(c.weight_bytes, c.weight_params), 2),
        ]);
    }
    out.push_str(&tbl(&t, md));
    let mut t = Table::new(&GRAPH_OPS);
    for o in &r.ops {
        t.push(vec![
            o.op.clone(),
            o.nodes.to_string(),
            o.view_nodes.to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&tbl(&t, md));
    out.push_str("\nArchitecture cross-check (non-view nodes):\n");
    let mut t = Table::new(&EXPECTED);
    for e in &r.expected {
        t.push(vec![
            e.what.clone(),
            e.expected.to_string(),
            e.found.to_string(),
            e.derivation.clone(),
            if e.ok { "ok" } else { "MISMATCH" }.into(),
        ]);
    }
    out.push_str(&tbl(&t, md));
    for i in &r.issues {
        out.push_str(&format!("ERROR: {i}\n"));
    }
    out.push_str(if r.ok() {
        "Graph check: PASS\n"
    } else {
        "Graph check: FAIL\n"
    });
    out
}

/// Dead and partially dead nodes with their waste.
pub fn render_dead_work(d: &DeadWorkReport) -> String {
    dead_work(d, false)
}

/// [`render_dead_work`] as Markdown.
pub fn render_dead_work_md(d: &DeadWorkReport) -> String {
    md_paragraphs(&dead_work(d, true))
}

fn dead_work(d: &DeadWorkReport, md: bool) -> String {
    let mut out = format!(
        "Dead work of {}: roots {} output and {} persistent-state nodes; {} dead, {} partially \
         dead, {} dead view nodes\n",
        d.engine,
        d.output_nodes,
        d.persistent_nodes,
        d.dead.len(),
        d.partial.len(),
        d.dead_view_nodes
    );
    if d.output_nodes == 0 {
        out.push_str("ERROR: no node is marked as an output: every node looks dead\n");
    }
    if d.clean() {
        out.push_str("No dead work.\n");
        return out;
    }
    let mut t = Table::new(&WASTE);
    for w in d.dead.iter().chain(&d.partial) {
        t.push(vec![
            w.name.clone(),
            w.category.name().into(),
            w.layer.map_or_else(String::new, |l| l.to_string()),
            w.rows_computed
                .map_or_else(|| "-".into(), |r| r.to_string()),
            w.rows_needed.to_string(),
            mb(w.wasted_bytes),
            gflop(w.wasted_flops),
        ]);
    }
    out.push_str(&tbl(&t, md));
    out.push_str(&format!(
        "Wasted: {} GFLOP ({} of all), {} MB ({} of all)\n",
        gflop(d.wasted_flops),
        pct(Some(d.wasted_flops_ratio())),
        mb(d.wasted_bytes),
        pct(Some(d.wasted_bytes_ratio()))
    ));
    out
}

fn check_line(name: &str, c: &ToleranceCheck) -> String {
    format!(
        "{name}: {} ms vs {} ms, deviation {} (tolerance {}): {}",
        ms(c.measured_ms),
        ms(c.reference_ms),
        pct(c.deviation_ratio),
        pct(Some(c.tolerance_ratio)),
        if c.pass { "pass" } else { "FAIL" }
    )
}

fn replay_text(r: &ReplayReport, md: bool) -> String {
    let mut out =
        String::from("\nIn-graph replay (increment = replay x1 - observe, paired per window):\n");
    let mut t = Table::new(&REPLAY);
    for c in &r.categories {
        t.push(vec![
            c.category.label().into(),
            c.nodes.to_string(),
            ms(c.baseline.median_ms),
            ms(c.replay.median_ms),
            ms(c.increment.median_ms),
            ms(c.increment.iqr_ms),
            if c.trusted { "yes" } else { "NO" }.into(),
        ]);
    }
    out.push_str(&tbl(&t, md));
    let v = &r.validations;
    let reference = if r.observation.in_node_ms.is_some() {
        "the observe-all run's time inside its nodes"
    } else {
        "the observe-all run's wall time"
    };
    out.push_str(&format!(
        "(a) {}\n(b) {}\n",
        check_line(
            &if v.all_at_once_same_run {
                "all categories at once: their replays vs the nodes they repeat, in the same runs"
                    .to_string()
            } else {
                format!("all categories at once vs {reference}")
            },
            &v.all_at_once
        ),
        check_line(
            &format!("sum of per-category increments vs {reference}"),
            &v.sum_of_parts
        )
    ));
    let l = &v.linearity;
    let incs: Vec<String> = l
        .replays
        .iter()
        .zip(&l.increments_ms)
        .map(|(k, i)| format!("x{k} {}", ms(*i)))
        .collect();
    let over = if l.base_replays > 0 {
        format!(" over x{}", l.base_replays)
    } else {
        String::new()
    };
    out.push_str(&format!(
        "(c) linearity of {}: {} ms{over}; fit slope {} ms, intercept {} ms, R^2 {} (need >= {}, \
         |intercept| <= {} of slope): {}\n",
        l.category,
        incs.join(", "),
        opt(l.fit.as_ref().map(|f| f.slope_ms), 3),
        opt(l.fit.as_ref().map(|f| f.intercept_ms), 3),
        opt(l.fit.as_ref().map(|f| f.r2), 4),
        l.min_r2,
        pct(Some(l.max_intercept_ratio)),
        if l.pass { "pass" } else { "FAIL" }
    ));
    let d = &v.digest;
    out.push_str(&format!(
        "(d) output digest {:#018x}: {} distinct plain digests; replays that changed their observe run's output: [{}]: {}{}\n",
        d.reference_digest,
        d.distinct_plain_digests,
        d.changed_by.join(", "),
        if d.pass { "pass" } else { "FAIL" },
        if d.observation_changes_output {
            " (observing itself changes the output: a fusion split rounds differently)"
        } else {
            ""
        }
    ));
    out.push_str(&format!(
        "Observation cost: observe-all {} ms vs plain {} ms: {} ms ({})\n",
        ms(r.observation.observe_all_ms),
        ms(r.observation.plain_ms),
        ms(r.observation.cost_ms),
        pct(r.observation.cost_ratio)
    ));
    if let (Some(inside), Some(outside)) =
        (r.observation.in_node_ms, r.observation.outside_nodes_ms)
    {
        out.push_str(&format!(
            "Observe-all run inside its nodes {} ms, outside them {} ms (graph building, \
             scheduling, host work: in no category); checks (a) and (b) compare with the time \
             inside\n",
            ms(inside),
            ms(outside)
        ));
    }
    if r.trusted {
        out.push_str("Replay: trusted\n");
    } else {
        out.push_str("Replay: UNTRUSTED\n");
        for p in &r.problems {
            out.push_str(&format!("  - {p}\n"));
        }
    }
    out.push_str(&format!("Note: {}\n", r.upper_bound_note));
    out
}

/// One engine's measurement: end-to-end, standalone (with first-k), replay with every
/// validation, probe completeness and the noise gate's discards.
pub fn render_measurement(m: &Measurement) -> String {
    measurement(m, false)
}

/// [`render_measurement`] as Markdown.
pub fn render_measurement_md(m: &Measurement) -> String {
    md_paragraphs(&measurement(m, true))
}

fn measurement(m: &Measurement, md: bool) -> String {
    let e = &m.e2e;
    let w = crate::subject::Workload {
        n_past: m.n_past as usize,
        n_tokens: m.n_tokens as usize,
    };
    let mut out = format!(
        "{}@{} ({}), {}: {} median {} ms (IQR {} ms, n {}), {} tok/s\n",
        m.engine.engine,
        m.engine.version,
        m.engine.backend,
        w.heading(),
        w.run_word(),
        ms(e.prefill.stats.median_ms),
        ms(e.prefill.stats.iqr_ms),
        e.prefill.stats.n,
        opt(e.prefill_tok_s, 1)
    );
    if let Some(d) = &e.decode {
        out.push_str(&format!(
            "decode tg{}: median {} ms, {} tok/s\n",
            d.n_gen,
            ms(d.series.stats.median_ms),
            opt(d.tok_s, 1)
        ));
    }
    if let Some(o) = &m.opbench {
        out.push_str(&format!(
            "\nStandalone timing ({} routing):\n",
            o.routing.name()
        ));
        let mut t = Table::new(&STANDALONE);
        for c in &o.categories {
            t.push(vec![
                c.category.label().into(),
                c.nodes.to_string(),
                ms(c.ms),
                ms(c.spread_ms),
                opt(c.first_k_ms, 3),
                opt(c.first_k_undercount_ms, 3),
                c.top_op
                    .as_ref()
                    .map_or_else(|| "n/a".into(), |k| k.representative.clone()),
                opt(c.top_op.as_ref().and_then(|k| k.tflops), 3),
            ]);
        }
        out.push_str(&tbl(&t, md));
        if let Some(c) = &o.coverage {
            out.push_str(&format!(
                "Coverage: {} ms / {} ms e2e = {}; with first-k routing {}\n",
                ms(c.sum_ms),
                ms(c.e2e_ms),
                pct(Some(c.coverage_ratio)),
                pct(c.first_k_coverage_ratio)
            ));
        }
        for r in &o.routing_tables {
            let source = match (&r.recorded_by, r.layer) {
                (Some(by), Some(l)) => format!(", recorded by {by}, layer {l}: the median layer"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "Routing {}: {} tokens x top-{} touch {} of {} experts (max {} tokens per expert{})\n",
                r.routing.name(),
                r.n_tokens,
                r.k,
                r.histogram.experts_touched,
                r.histogram.n_experts,
                r.histogram.max_tokens_per_expert,
                source
            ));
        }
        for g in &o.routing_agreement {
            out.push_str(&format!(
                "Routing agreement: {}'s own router chose the same experts as {}'s in {} of {} \
                 token sets ({:.2}%, {} MoE layers; {} of {} token-expert pairs)\n",
                g.b,
                g.a,
                g.equal_sets,
                g.sets,
                100.0 * g.equal_share(),
                g.layers,
                g.shared_pairs,
                g.pairs
            ));
        }
        for u in &o.unsupported {
            out.push_str(&format!(
                "Not timed: {} ({} nodes): {}\n",
                u.key, u.nodes, u.reason
            ));
        }
    }
    if let Some(r) = &m.replay {
        out.push_str(&replay_text(r, md));
    }
    let p = &m.probe;
    out.push_str(&format!(
        "\nProbe completeness: {} of {} plain/observe runs dispatched exactly the {} work nodes{}\n",
        p.runs_checked - p.mismatched_runs,
        p.runs_checked,
        p.work_nodes,
        if p.complete { "" } else { ": INCOMPLETE" }
    ));
    for x in &p.mismatches {
        out.push_str(&format!(
            "  - {} reported {} dispatches\n",
            x.series, x.dispatches
        ));
    }
    out
}
