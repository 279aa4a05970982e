//! `tally ledger`: two engines, category by category, the same method on both sides.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tally_ledger::measure::Measurement;
use tally_ledger::report::{render_json, render_markdown, render_svg, render_terminal};
use tally_ledger::{build_ledger, measure_pair};

use super::common::{open_model, tally_subject, write_file};
use super::measure::Common;
use super::{Format, InputError, NoVerdict};

/// Compare two engines category by category: where the gap lives, what to attack, what to leave.
///
/// Either from two measurement files (`tally measure` output; e.g. one engine at two commits):
///   tally ledger A.measurement.json B.measurement.json
/// or measured now, both engines on the same model file, interleaved and noise-gated:
///   tally ledger --model tiny.gguf --peer llama.cpp
///   tally ledger --model tiny.gguf --peer self          (tally against itself: a null check)
/// or one decode step after a context of D tokens (the context restored, untimed, before every
/// run), the whole method applied to that step on both engines:
///   tally ledger --model tiny.gguf --peer llama.cpp --step-at 512
/// Writes ledger-ppN.{md,json,svg} (a step: ledger-step-dD.*) to --out-dir and prints the
/// table. Exit code 3 when a validation failed or the noise gate ran out of retries: the
/// headline says "no verdict".
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Two measurement JSON files: ours, then the peer's.
    #[arg(num_args = 0..=2)]
    files: Vec<PathBuf>,
    /// Measure tally against this peer now: llama.cpp or self.
    #[arg(long)]
    peer: Option<String>,
    /// With files: judge the recorded replay windows again under this build's validation rules,
    /// with the tolerances they were recorded with (nothing is re-measured; the ledger says so).
    #[arg(long)]
    reanalyse: bool,
    /// Measuring options (with --peer), output directory and format (always).
    #[command(flatten)]
    common: Common,
}

fn read_measurement(p: &Path) -> Result<Measurement> {
    let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| InputError(format!("{} is not a tally measurement: {e}", p.display())).into())
}

pub fn main(a: Args) -> Result<()> {
    let c = &a.common;
    if a.reanalyse && a.files.is_empty() {
        return Err(InputError(
            "--reanalyse judges the replay windows of two measurement files: give the files".into(),
        )
        .into());
    }
    let (ma, mb) = match (a.files.len(), &a.peer, &c.model) {
        (2, None, None) => (
            read_measurement(&a.files[0])?,
            read_measurement(&a.files[1])?,
        ),
        (0, Some(peer), Some(_)) => measure_against(peer, c)?,
        _ => {
            return Err(InputError(
                "give two measurement files, or --model FILE --peer llama.cpp|self".into(),
            )
            .into());
        }
    };
    let (mut ma, mut mb) = (ma, mb);
    let mut reanalysed = false;
    if a.reanalyse {
        for m in [&mut ma, &mut mb] {
            if let Some(r) = &m.replay {
                m.replay = Some(r.reanalysed(&r.recorded_config())?);
                reanalysed = true;
            }
        }
    }
    let (out_dir, format) = (c.out_dir.clone(), c.output);
    let mut l = build_ledger(&ma, &mb);
    if reanalysed {
        l.notes.push(format!(
            "replay validations re-derived from the recorded windows by tally@{} (nothing re-measured)",
            env!("TALLY_GIT_COMMIT")
        ));
    }
    let n = l.workload().label();
    write_file(&out_dir, &format!("ledger-{n}.md"), &render_markdown(&l))?;
    write_file(&out_dir, &format!("ledger-{n}.json"), &render_json(&l)?)?;
    write_file(&out_dir, &format!("ledger-{n}.svg"), &render_svg(&l))?;
    match format {
        Format::Json => println!("{}", render_json(&l)?),
        Format::Md => println!("{}", render_markdown(&l)),
        Format::Text => {
            println!("{}", render_terminal(&l));
            println!("written: {}/ledger-{n}.{{md,json,svg}}", out_dir.display());
        }
    }
    let withheld = l.withheld();
    if !withheld.is_empty() {
        return Err(NoVerdict(format!(
            "no verdict (reports written): {}",
            withheld.join("; ")
        ))
        .into());
    }
    Ok(())
}

fn measure_against(peer: &str, c: &Common) -> Result<(Measurement, Measurement)> {
    let model = open_model(c.model()?)?;
    c.check(model.config.context_length)?;
    let cfg = c.config(true, true)?;
    let ctx = c.positions();
    let w = c.workload();
    let mut ours = tally_subject(&model, &c.backend, c.threads, ctx, true)?;
    let pb = super::common::spinner(&format!(
        "measuring tally and {peer} ({}), {}, interleaved: graph, end to end, standalone ops, in-graph replay",
        c.backend,
        w.describe()
    ));
    let measured = match peer {
        "self" => {
            let mut twin = tally_subject(&model, &c.backend, c.threads, ctx, true)?;
            measure_pair(&mut ours, &mut twin, &cfg).map_err(anyhow::Error::from)
        }
        "llama.cpp" | "llama" => super::peer::measure_with_llama(&mut ours, c, &cfg),
        other => {
            pb.finish_and_clear();
            return Err(InputError(format!("unknown peer `{other}` (llama.cpp, self)")).into());
        }
    };
    pb.finish_and_clear();
    let (ma, mb) = measured?;
    for (m, who) in [(&ma, "tally"), (&mb, peer)] {
        let name = format!("{who}-{}-{}.measurement.json", m.engine.backend, w.label());
        write_file(&c.out_dir, &name, &serde_json::to_string_pretty(m)?)?;
    }
    Ok((ma, mb))
}
