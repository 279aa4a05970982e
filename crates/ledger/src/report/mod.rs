//! Reports of a [`Ledger`]: aligned terminal text, Markdown, JSON and an SVG bar chart; plus
//! plain-text reports of the graph check and the dead-work analysis.
//!
//! Every table has fixed columns whose headers carry their units; cells are rendered from the
//! typed rows, never from string-built column names.

mod detail;
mod svg;
pub mod table;

pub use detail::{
    render_dead_work, render_dead_work_md, render_graph_report, render_graph_report_md,
    render_measurement, render_measurement_md,
};
pub use svg::render_svg;

use crate::error::LedgerError;
use crate::ledger::{FigureSource, Ledger, LedgerRow, RowMethod, Side, SideSummary};
use table::{Column, Table, left, right};

/// Output style of the text reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Terminal,
    Markdown,
}

pub(crate) fn ms(v: f64) -> String {
    format!("{v:.3}")
}

pub(crate) fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{x:.digits$}"))
}

pub(crate) fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{:.1}%", x * 100.0))
}

/// A share of a measured peak; above 100% it is flagged (the peak is wrong, see the warnings).
pub(crate) fn of_peak(v: Option<f64>) -> String {
    match v {
        Some(x) if x > 1.0 => format!("{}!", pct(v)),
        _ => pct(v),
    }
}

const MAIN: [Column; 14] = [
    left("category"),
    left("method"),
    right("A ms"),
    right("B ms"),
    right("gap ms"),
    right("A share"),
    right("B share"),
    left("verdict"),
    right("A standalone ms"),
    right("A in-graph ms"),
    right("A first-k ms"),
    right("B standalone ms"),
    right("B in-graph ms"),
    right("B first-k ms"),
];

const BYTES: [Column; 16] = [
    left("category"),
    right("A MB read"),
    right("B MB read"),
    right("A GB/s"),
    right("B GB/s"),
    right("A of peak GB/s"),
    right("B of peak GB/s"),
    right("A bits/weight"),
    right("B bits/weight"),
    right("A GFLOP"),
    right("B GFLOP"),
    right("A TFLOP/s"),
    right("B TFLOP/s"),
    right("A floor ms"),
    right("B floor ms"),
    left("byte check"),
];

const KERNELS: [Column; 6] = [
    left("category"),
    left("A biggest kernel"),
    right("A kernel TFLOP/s"),
    left("B biggest kernel"),
    right("B kernel TFLOP/s"),
    left("kernel check"),
];

fn figure(s: &Side) -> String {
    match s.source {
        FigureSource::Missing => "n/a".into(),
        _ => ms(s.ms),
    }
}

fn in_graph(s: &Side) -> String {
    match s.in_graph_ms {
        Some(v) if s.in_graph_trusted => ms(v),
        Some(v) => format!("{}*", ms(v)),
        None => "n/a".into(),
    }
}

fn method(r: &LedgerRow) -> String {
    match r.method {
        RowMethod::Mixed => format!("mixed ({}/{})", r.a.source, r.b.source),
        m => m.to_string(),
    }
}

fn main_table(l: &Ledger) -> Table {
    let mut t = Table::new(&MAIN);
    for r in &l.rows {
        t.push(vec![
            r.category.label().to_string(),
            method(r),
            figure(&r.a),
            figure(&r.b),
            format!("{:+.3}", r.gap_ms),
            pct(Some(r.a.share_ratio)),
            pct(Some(r.b.share_ratio)),
            r.verdict.word().to_string(),
            opt(r.a.standalone_ms, 3),
            in_graph(&r.a),
            opt(r.a.standalone_first_k_ms, 3),
            opt(r.b.standalone_ms, 3),
            in_graph(&r.b),
            opt(r.b.standalone_first_k_ms, 3),
        ]);
    }
    t.push(vec![
        "Total".into(),
        String::new(),
        ms(l.totals.a_ms),
        ms(l.totals.b_ms),
        format!("{:+.3}", l.totals.gap_ms),
        pct(Some(1.0)),
        pct(Some(1.0)),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    ]);
    t
}

fn bytes_table(l: &Ledger) -> Table {
    let mut t = Table::new(&BYTES);
    let mb = |b: u64| format!("{:.3}", b as f64 / 1e6);
    let gflop = |f: u64| format!("{:.3}", f as f64 / 1e9);
    for r in &l.rows {
        t.push(vec![
            r.category.label().to_string(),
            mb(r.a.bytes_read),
            mb(r.b.bytes_read),
            opt(r.a.gbps, 1),
            opt(r.b.gbps, 1),
            of_peak(r.a.gbps_of_peak_ratio),
            of_peak(r.b.gbps_of_peak_ratio),
            opt(r.a.bits_per_weight, 2),
            opt(r.b.bits_per_weight, 2),
            gflop(r.a.flops),
            gflop(r.b.flops),
            opt(r.a.tflops, 3),
            opt(r.b.tflops, 3),
            opt(r.a.roofline.floor_ms, 3),
            opt(r.b.roofline.floor_ms, 3),
            r.byte_check.verdict.message().to_string(),
        ]);
    }
    t
}

fn kernel_table(l: &Ledger) -> Table {
    let mut t = Table::new(&KERNELS);
    let name = |s: &Side| {
        s.top_kernel.as_ref().map_or_else(
            || "n/a".into(),
            |k| format!("{} x{}", k.representative, k.nodes),
        )
    };
    let tf = |s: &Side| opt(s.top_kernel.as_ref().and_then(|k| k.tflops), 3);
    for r in &l.rows {
        t.push(vec![
            r.category.label().to_string(),
            name(&r.a),
            tf(&r.a),
            name(&r.b),
            tf(&r.b),
            r.kernel_check.verdict.message().to_string(),
        ]);
    }
    t
}

fn side_lines(name: &str, s: &SideSummary, run: &str) -> Vec<String> {
    let mut v = vec![format!(
        "{name} = {}: {run} {} ms (IQR {} ms, {} tok/s), decode {} tok/s",
        s.label,
        ms(s.e2e_prefill_ms),
        ms(s.e2e_prefill_spread_ms),
        opt(s.prefill_tok_s, 1),
        opt(s.decode_tok_s, 1)
    )];
    let in_graph = match (s.observe_all_ms, s.outside_nodes_ms) {
        (Some(all), Some(out)) => format!(
            "in-graph {} of the observe-all run's {:.3} ms inside its nodes ({:.3} ms outside \
             them: graph building, scheduling, host work)",
            pct(s.in_graph_coverage_ratio),
            all - out,
            out
        ),
        _ => format!(
            "in-graph {} of the observe-all run's wall time {} ms (the engine does not time \
             its nodes)",
            pct(s.in_graph_coverage_ratio),
            opt(s.observe_all_ms, 3)
        ),
    };
    v.push(format!(
        "{name} coverage: standalone {} of e2e (first-k routing: {}); {in_graph}; observing \
         costs {} ms ({})",
        pct(s.standalone_coverage_ratio),
        pct(s.standalone_first_k_coverage_ratio),
        opt(s.observation_cost_ms, 3),
        pct(s.observation_cost_ratio)
    ));
    v.push(match s.replay_trusted {
        Some(true) => format!("{name} replay: trusted (validations a-d passed)"),
        Some(false) => format!("{name} replay: UNTRUSTED: {}", s.replay_problems.join("; ")),
        None => format!("{name} replay: not run"),
    });
    v.push(format!(
        "{name} probes: {} ({} of {} plain/observe runs dispatched the graph's {} work nodes)",
        if s.probe.complete {
            "complete"
        } else {
            "INCOMPLETE"
        },
        s.probe.runs_checked - s.probe.mismatched_runs,
        s.probe.runs_checked,
        s.probe.work_nodes
    ));
    v.push(format!(
        "{name} dead work: {} dead, {} partially dead nodes; {:.3} GFLOP ({}) and {:.3} MB ({}) wasted{}",
        s.dead_nodes,
        s.partial_nodes,
        s.wasted_flops as f64 / 1e9,
        pct(Some(s.wasted_flops_ratio)),
        s.wasted_bytes as f64 / 1e6,
        pct(Some(s.wasted_bytes_ratio)),
        if s.dead_work_examples.is_empty() {
            String::new()
        } else {
            format!(": {}", s.dead_work_examples.join(", "))
        }
    ));
    v.push(format!(
        "{name} noise gate: {} windows discarded and re-measured{}{}",
        s.gate_discards,
        if s.gate_exhausted {
            " (retry budget EXHAUSTED)"
        } else {
            ""
        },
        match s.gate_level_range {
            Some((lo, hi)) => format!(
                "; the host's speed moved between windows (levels {lo:.2}-{hi:.2} of typical): \
                 replay figures corrected per window and per group"
            ),
            None => String::new(),
        }
    ));
    v
}

/// The one-line verdict every report leads with: end-to-end prefill, or "no verdict" and why.
pub fn headline(l: &Ledger) -> String {
    let e = &l.totals.e2e;
    let withheld = l.withheld();
    let w = l.workload();
    // A prefill keeps the headline it always had; any other workload names itself.
    let run = if w.is_prefill() {
        "prefill".to_string()
    } else {
        format!("{}:", w.describe())
    };
    if withheld.is_empty() {
        format!(
            "Verdict: {} end to end ({run} A {} ms, B {} ms, gap {:+.3} ms, noise {} ms)",
            e.verdict.word(),
            ms(e.a_ms),
            ms(e.b_ms),
            e.effect_ms,
            ms(e.noise_ms)
        )
    } else {
        format!(
            "Verdict: NO VERDICT ({}); {run} A {} ms, B {} ms, gap {:+.3} ms, not judged",
            withheld.join("; "),
            ms(e.a_ms),
            ms(e.b_ms),
            e.effect_ms
        )
    }
}

fn render(l: &Ledger, style: Style) -> String {
    let (h1, h2, bullet) = match style {
        Style::Terminal => ("", "", "  "),
        Style::Markdown => ("# ", "## ", "- "),
    };
    let table = |t: Table| match style {
        Style::Terminal => t.terminal(),
        Style::Markdown => t.markdown(),
    };
    let w = l.workload();
    let mut out = format!(
        "{h1}Ledger {}: A = {} vs B = {}\n\n{}\n\n",
        w.heading(),
        l.a.label,
        l.b.label,
        headline(l)
    );
    if !l.warnings.is_empty() {
        out.push_str(&format!("{h2}WARNINGS\n"));
        for warning in &l.warnings {
            out.push_str(&format!("{bullet}{warning}\n"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "{h2}Time per category (sorted by gap; * = in-graph figure failed validation)\n\n"
    ));
    out.push_str(&table(main_table(l)));
    let e = &l.totals.e2e;
    out.push_str(&format!(
        "\nEnd-to-end {}: A {} ms, B {} ms, gap {:+.3} ms (noise {} ms): {}\n\n",
        w.run_word(),
        ms(e.a_ms),
        ms(e.b_ms),
        e.effect_ms,
        ms(e.noise_ms),
        e.verdict.word()
    ));
    out.push_str(&format!("{h2}Bytes, FLOPs and the roofline floor\n\n"));
    out.push_str(&table(bytes_table(l)));
    out.push_str(&format!("\n{h2}Biggest single kernel (standalone)\n\n"));
    out.push_str(&table(kernel_table(l)));
    out.push_str(&format!("\n{h2}Sides\n\n"));
    for line in side_lines("A", &l.a, w.run_word())
        .into_iter()
        .chain(side_lines("B", &l.b, w.run_word()))
    {
        out.push_str(&format!("{bullet}{line}\n"));
    }
    out.push_str(&format!("\n{h2}Notes\n\n"));
    for n in &l.notes {
        out.push_str(&format!("{bullet}{n}\n"));
    }
    out
}

/// The ledger as aligned terminal text.
pub fn render_terminal(l: &Ledger) -> String {
    render(l, Style::Terminal)
}

/// The ledger as Markdown.
pub fn render_markdown(l: &Ledger) -> String {
    render(l, Style::Markdown)
}

/// The ledger as pretty-printed JSON (the versioned document described in docs/ledger.md).
pub fn render_json(l: &Ledger) -> Result<String, LedgerError> {
    Ok(serde_json::to_string_pretty(l)?)
}

#[cfg(test)]
mod tests;
