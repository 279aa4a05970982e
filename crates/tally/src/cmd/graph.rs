//! `tally graph`: the real plan for a prompt length, its counts cross-checked against the
//! architecture, and its dead work.

use std::path::PathBuf;

use anyhow::Result;
use tally_ledger::report::{
    render_dead_work, render_dead_work_md, render_graph_report, render_graph_report_md,
};
use tally_ledger::subject::Subject;
use tally_ledger::{check_graph, dead_work};

use super::Format;
use super::common::{open_model, tally_subject, write_file};

/// Export the plan of nodes tally runs for a prompt, check its counts, find dead work.
///
/// Counts per op and category are checked against counts derived from the model config (a
/// mismatch is an error, exit code 1). Dead work: nodes whose outputs reach neither the logits
/// nor persistent state, and nodes computing more rows than are needed. tally's own plan has none;
/// `--no-prune` switches off last-layer pruning to show what the analysis flags.
///
/// Example: tally graph --model tiny.gguf -p 512 --no-prune
#[derive(clap::Args)]
pub struct Args {
    /// The qwen35moe GGUF file (of a split model, the first part: NAME-00001-of-0000N.gguf).
    #[arg(long)]
    model: PathBuf,
    /// Prompt length.
    #[arg(short = 'p', long, default_value_t = 512)]
    tokens: usize,
    /// Compute the whole last layer (for the dead-work demonstration).
    #[arg(long)]
    no_prune: bool,
    /// Write the full export as JSON to this file.
    #[arg(long)]
    export: Option<PathBuf>,
    /// Report format: text, json or md.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

pub fn main(a: Args) -> Result<()> {
    let model = open_model(&a.model)?;
    super::checks::prompt_len("-p", a.tokens, model.config.context_length)?;
    // The graph is a function of the plan: the CPU backend is enough to export it.
    let mut subject = tally_subject(&model, "cpu", 1, a.tokens, !a.no_prune)?;
    let g = subject.graph(tally_ledger::subject::Workload::prefill(a.tokens))?;
    let report = check_graph(&g);
    let dead = dead_work(&g);
    if let Some(p) = &a.export {
        let dir = p.parent().map(|d| d.to_path_buf()).unwrap_or_default();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        write_file(&dir, &name, &serde_json::to_string_pretty(&g)?)?;
    }
    match a.output {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"graph": report, "dead_work": dead}))?
        ),
        Format::Text => {
            println!("{}", render_graph_report(&report));
            println!("{}", render_dead_work(&dead));
        }
        Format::Md => {
            println!("## Graph\n\n{}", render_graph_report_md(&report));
            println!("## Dead work\n\n{}", render_dead_work_md(&dead));
        }
    }
    if !report.ok() {
        anyhow::bail!("the plan's counts do not match the architecture (see above)");
    }
    Ok(())
}
