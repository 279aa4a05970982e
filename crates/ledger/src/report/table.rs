//! A small aligned table: fixed columns (headers carry units), typed cells rendered once,
//! printed either as aligned text or as a Markdown table.

/// Horizontal alignment of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Number columns.
    Right,
}

/// A column: header (with its unit) and alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Header text, unit included (`A ms`, `GB/s`).
    pub header: &'static str,
    /// Alignment.
    pub align: Align,
}

/// A left-aligned column.
pub const fn left(header: &'static str) -> Column {
    Column {
        header,
        align: Align::Left,
    }
}

/// A right-aligned column.
pub const fn right(header: &'static str) -> Column {
    Column {
        header,
        align: Align::Right,
    }
}

/// Rows of cells under fixed columns.
#[derive(Debug, Clone)]
pub struct Table {
    columns: &'static [Column],
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &'static [Column]) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one cell per column (a programming error otherwise).
    pub fn push(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.columns.len());
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|s| s.chars().count())
                    .chain([c.header.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    fn line(&self, cells: &[&str], widths: &[usize], sep: &str) -> String {
        let parts: Vec<String> = self
            .columns
            .iter()
            .zip(widths)
            .zip(cells)
            .map(|((c, &w), s)| match c.align {
                Align::Left => format!("{s:<w$}"),
                Align::Right => format!("{s:>w$}"),
            })
            .collect();
        parts.join(sep)
    }

    /// Aligned plain text with a dashed rule under the header.
    pub fn terminal(&self) -> String {
        let w = self.widths();
        let headers: Vec<&str> = self.columns.iter().map(|c| c.header).collect();
        let mut out = self.line(&headers, &w, "  ").trim_end().to_string();
        out.push('\n');
        let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for r in &self.rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            out.push_str(self.line(&cells, &w, "  ").trim_end());
            out.push('\n');
        }
        out
    }

    /// A Markdown (GFM) table; `|` in cells is escaped.
    pub fn markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = String::new();
        let headers: Vec<String> = self.columns.iter().map(|c| esc(c.header)).collect();
        out.push_str(&format!("| {} |\n", headers.join(" | ")));
        let rule: Vec<&str> = self
            .columns
            .iter()
            .map(|c| match c.align {
                Align::Left => ":---",
                Align::Right => "---:",
            })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|s| esc(s)).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLS: [Column; 2] = [left("name"), right("time ms")];

    #[test]
    fn aligns_columns_and_escapes_markdown() {
        let mut t = Table::new(&COLS);
        t.push(vec!["dense".into(), "6.120".into()]);
        t.push(vec!["a|b".into(), "10.000".into()]);
        assert_eq!(
            t.terminal(),
            "name   time ms\n-----  -------\ndense    6.120\na|b     10.000\n"
        );
        assert_eq!(
            t.markdown(),
            "| name | time ms |\n| :--- | ---: |\n| dense | 6.120 |\n| a\\|b | 10.000 |\n"
        );
    }
}
