//! The ledger as an SVG bar chart, written as XML text: per category two horizontal bars (A and
//! B) on a shared ms axis, with a legend. Rows keep the ledger's order (largest gap first).

use std::fmt::Write;

use crate::ledger::{FigureSource, Ledger, RowMethod};

const CHART_PX: f64 = 600.0;
const RIGHT_PX: f64 = 110.0;
/// Above the bars: title, legend, note, headline and end-to-end line (warnings add lines).
const HEAD_PX: f64 = 112.0;
const LINE_PX: f64 = 16.0;
/// Width of one character of the 12 px sans-serif labels, generously (no font metrics here).
const CHAR_PX: f64 = 7.2;
const GROUP_PX: f64 = 40.0;
const BAR_PX: f64 = 13.0;
const COLOR_A: &str = "#1f77b4";
const COLOR_B: &str = "#ff7f0e";

/// Escapes text for XML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A tick step of 1, 2 or 5 x 10^k giving about five ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

/// The chart. Bars of figures that are not in-graph are drawn hatched-light (half opacity)
/// and the row label says which method it uses.
pub fn render_svg(l: &Ledger) -> String {
    let chart_px = CHART_PX;
    let label = |r: &crate::ledger::LedgerRow| match r.method {
        RowMethod::InGraph => r.category.label().to_string(),
        m => format!("{} [{m}]", r.category.label()),
    };
    // The label column fits the longest label: labels are right-aligned to the bars and would
    // be cut at the left edge otherwise.
    let longest = l
        .rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(10);
    let label_px = (longest as f64 * CHAR_PX + 24.0).max(160.0);
    let warnings = l.warnings.len();
    let top_px = HEAD_PX + warnings as f64 * LINE_PX;
    // Wide enough for the longest headline or warning line too: SVG text does not wrap.
    let longest_line = l
        .warnings
        .iter()
        .map(|w| w.chars().count() + 9)
        .chain([super::headline(l).chars().count()])
        .max()
        .unwrap_or(0);
    let width_px = (label_px + chart_px + RIGHT_PX).max(longest_line as f64 * CHAR_PX + 20.0);
    let max_ms = l
        .rows
        .iter()
        .flat_map(|r| [r.a.ms, r.b.ms])
        .fold(0.0f64, f64::max);
    let step = tick_step(if max_ms > 0.0 { max_ms } else { 1.0 });
    let axis_max = (max_ms / step).ceil().max(1.0) * step;
    let x = |ms: f64| label_px + ms.max(0.0) / axis_max * chart_px;
    let axis_y = top_px + l.rows.len() as f64 * GROUP_PX;
    let height = axis_y + 50.0;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height}" viewBox="0 0 {width_px} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width_px}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        10,
        esc(&format!(
            "Ledger {}: time per category (ms)",
            l.workload().heading()
        ))
    );
    for (i, (name, label, color)) in [("A", &l.a.label, COLOR_A), ("B", &l.b.label, COLOR_B)]
        .into_iter()
        .enumerate()
    {
        let lx = 10.0 + i as f64 * 460.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="36" width="14" height="12" fill="{color}"/><text x="{}" y="46">{}</text>"#,
            lx + 20.0,
            esc(&format!("{name} = {label}"))
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="10" y="64" fill="#555">{}</text>"##,
        esc(
            "faded bars: standalone figures (in-graph replay missing or untrusted); in-graph figures are upper bounds"
        )
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="84" font-weight="bold" fill="{}">{}</text>"##,
        if l.withheld().is_empty() {
            "#000"
        } else {
            "#b00"
        },
        esc(&super::headline(l))
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="100">{}</text>"##,
        esc(&format!(
            "category totals: A {} ms, B {} ms, gap {:+.3} ms",
            super::ms(l.totals.a_ms),
            super::ms(l.totals.b_ms),
            l.totals.gap_ms
        ))
    );
    for (i, w) in l.warnings.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="10" y="{}" fill="#b00">{}</text>"##,
            100.0 + (i + 1) as f64 * LINE_PX,
            esc(&format!("WARNING: {w}"))
        );
    }
    let mut t = 0.0;
    while t <= axis_max + step * 1e-9 {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" y1="{top_px}" x2="{tx:.1}" y2="{axis_y}" stroke="#ddd"/><text x="{tx:.1}" y="{}" text-anchor="middle">{}</text>"##,
            axis_y + 16.0,
            esc(&format!("{}", (t * 1000.0).round() / 1000.0))
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{label_px}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">ms</text>"##,
        label_px + chart_px,
        label_px + chart_px / 2.0,
        axis_y + 34.0
    );
    for (i, r) in l.rows.iter().enumerate() {
        let gy = top_px + i as f64 * GROUP_PX + 6.0;
        let _ = writeln!(
            s,
            r##"<text x="{x:.1}" y="{:.1}" text-anchor="end">{}</text><text x="{x:.1}" y="{:.1}" text-anchor="end" font-size="10" fill="#555">{}</text>"##,
            gy + BAR_PX - 1.0,
            esc(&label(r)),
            gy + 2.0 * BAR_PX + 1.0,
            esc(&format!("gap {:+.3} ms: {}", r.gap_ms, r.verdict.word())),
            x = label_px - 8.0,
        );
        for (j, side, color) in [(0.0, &r.a, COLOR_A), (1.0, &r.b, COLOR_B)] {
            let y = gy + j * (BAR_PX + 2.0);
            let w = x(side.ms) - label_px;
            let opacity = if side.source == FigureSource::InGraph {
                "1"
            } else {
                "0.45"
            };
            let value = match side.source {
                FigureSource::Missing => "n/a".to_string(),
                _ => format!("{:.3} ms", side.ms),
            };
            let _ = writeln!(
                s,
                r#"<rect x="{label_px}" y="{y:.1}" width="{w:.1}" height="{BAR_PX}" fill="{color}" fill-opacity="{opacity}"><title>{}</title></rect><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
                esc(&format!(
                    "{} {}: {value} ({})",
                    r.category.name(),
                    if j == 0.0 { "A" } else { "B" },
                    side.source
                )),
                label_px + w + 4.0,
                y + BAR_PX - 2.0,
                esc(&value)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_escaping() {
        assert_eq!(tick_step(10.0), 2.0);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(600.0), 200.0);
        assert_eq!(tick_step(0.3), 0.1);
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
