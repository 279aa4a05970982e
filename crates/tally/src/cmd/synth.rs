//! `tally synth`: writes a synthetic `qwen35moe` GGUF file.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tally_model::synth::{self, Preset, QuantMix, SynthSpec};

use super::{Format, InputError};

/// Write a qwen35moe GGUF with random weights (deterministic by --seed).
///
/// Presets: `35b-a3b` (the real shape, ~21 GB at q4_k_m), `mid` (real head counts, 8 layers,
/// 64 experts), `tiny` (hidden 256, 4 layers, 8 experts top-2) and `tiny-odd` (other head ratios,
/// odd vocabulary, last layer linear). Quant mixes follow llama-quantize's recipe for each file
/// type: `q4_k_m` (the stock mix), `q5_k_m`, `q6_k`, `q8_0`, `iq4_xs`, `iq4_nl`, `mxfp4_moe`,
/// `q4_0`, `q3_k_m`, `q2_k`, and `bf16`.
/// Any shape field can be overridden with `--set key=value` (e.g. `--set n_layers=8`).
/// `--mtp` adds the multi-token-prediction block after the trunk, in llama.cpp's converter
/// layout (`block_count` = layers + 1, `nextn_predict_layers` = 1, `blk.N.nextn.*`).
///
/// Example: tally synth --preset 35b-a3b --quant q4_k_m --seed 1 --out qwen35moe-q4km.gguf
#[derive(clap::Args)]
pub struct Args {
    /// Model shape: 35b-a3b, mid, tiny, tiny-odd.
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Quantisation mix: q4_k_m, q5_k_m, q6_k, q8_0, iq4_xs, iq4_nl, mxfp4_moe, q4_0, q3_k_m,
    /// q2_k, bf16.
    #[arg(long, default_value = "q4_k_m")]
    quant: String,
    /// Seed of every random weight.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file (written to FILE.partial, renamed when complete).
    #[arg(long)]
    out: PathBuf,
    /// Shape override, `key=value`; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Add one MTP (nextn) block after the trunk, as real files carry it.
    #[arg(long)]
    mtp: bool,
    /// How the large quantised tensors are filled: `exact` (every value drawn and quantised)
    /// or `pool` (blocks drawn at random from 4,096 real quantised blocks per type and scale:
    /// the 35B file in the time it takes to write it; for timing runs, not for checks; the
    /// router and every f32 tensor are still exact, and the file records the choice).
    #[arg(long, value_enum, default_value = "exact")]
    fill: FillArg,
    /// Print the tensor types, counts and sizes the file would have; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Report format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FillArg {
    Exact,
    Pool,
}

pub fn main(a: Args) -> Result<()> {
    let preset = Preset::parse(&a.preset).ok_or_else(|| {
        InputError(format!(
            "unknown preset `{}` (choose one of {})",
            a.preset,
            Preset::NAMES.join(", ")
        ))
    })?;
    let quant = QuantMix::parse(&a.quant).ok_or_else(|| {
        InputError(format!(
            "unknown quant mix `{}` (choose one of {})",
            a.quant,
            QuantMix::NAMES.join(", ")
        ))
    })?;
    let mut config = preset.config();
    synth::apply_overrides(&mut config, &a.overrides)?;
    config.n_mtp_layers = usize::from(a.mtp);
    let spec = SynthSpec {
        preset,
        config,
        quant,
        seed: a.seed,
        fill: match a.fill {
            FillArg::Exact => synth::Fill::Exact,
            FillArg::Pool => synth::Fill::Pool,
        },
    };
    if a.dry_run {
        let r = synth::plan_summary(&spec)?;
        match a.output {
            Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
            Format::Text | Format::Md => {
                println!(
                    "{} {}: {:.3} GB of tensor data, {:.2}B params (dry run: nothing written)",
                    r.preset,
                    r.quant,
                    r.file_bytes as f64 / 1e9,
                    r.params as f64 / 1e9
                );
                if a.output == Format::Md {
                    println!();
                    print_types_md(&r);
                } else {
                    print_types(&r);
                }
            }
        }
        return Ok(());
    }
    let total = synth::data_bytes(&spec)?;
    let partial = a.out.with_extension("gguf.partial");
    let file =
        File::create(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
    let out = BufWriter::with_capacity(8 << 20, file);
    let bar = if total > 64 << 20 && a.output == Format::Text {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let started = std::time::Instant::now();
    let report = synth::write_model(&spec, out, &mut |done, _| bar.set_position(done))
        .with_context(|| format!("writing {}", partial.display()));
    bar.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &a.out)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), a.out.display()))?;
    let file_bytes = std::fs::metadata(&a.out)?.len();
    let secs = started.elapsed().as_secs_f64();
    match a.output {
        Format::Json => {
            let mut v = serde_json::to_value(&report)?;
            v["path"] = a.out.display().to_string().into();
            v["file_bytes"] = file_bytes.into();
            v["seconds"] = secs.into();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Text => print_text(&a.out, file_bytes, secs, &report),
        Format::Md => print_md(&a.out, file_bytes, secs, &report),
    }
    Ok(())
}

fn print_text(path: &std::path::Path, file_bytes: u64, secs: f64, r: &synth::SynthReport) {
    println!(
        "wrote {} ({} {}, seed {}): {:.3} GB, {:.2}B params in {:.1} s ({:.2} GB/s)",
        path.display(),
        r.preset,
        r.quant,
        r.seed,
        file_bytes as f64 / 1e9,
        r.params as f64 / 1e9,
        secs,
        file_bytes as f64 / 1e9 / secs.max(1e-9)
    );
    print_types(r);
    for f in &r.fallbacks {
        println!("note: {f}");
    }
    if !r.routing.is_empty() {
        let touched: Vec<usize> = r.routing.iter().map(|l| l.experts_touched).collect();
        let maxes: Vec<usize> = r.routing.iter().map(|l| l.max_tokens_per_expert).collect();
        let mean = r
            .routing
            .iter()
            .map(|l| l.mean_tokens_per_expert)
            .sum::<f64>()
            / r.routing.len() as f64;
        println!(
            "expert load for a 512-token prompt (estimated from the routers on unit-RMS inputs): \
             experts touched per layer {}..{}, tokens per expert mean {:.1}, max {}..{}",
            touched.iter().min().unwrap_or(&0),
            touched.iter().max().unwrap_or(&0),
            mean,
            maxes.iter().min().unwrap_or(&0),
            maxes.iter().max().unwrap_or(&0),
        );
    }
}

fn print_md(path: &std::path::Path, file_bytes: u64, secs: f64, r: &synth::SynthReport) {
    println!(
        "Wrote `{}` ({} {}, seed {}): {:.3} GB, {:.2}B params in {:.1} s.\n",
        path.display(),
        r.preset,
        r.quant,
        r.seed,
        file_bytes as f64 / 1e9,
        r.params as f64 / 1e9,
        secs
    );
    print_types_md(r);
    for f in &r.fallbacks {
        println!("\nNote: {f}");
    }
}

fn print_types_md(r: &synth::SynthReport) {
    println!("| type | tensors | bytes | params |\n|---|---:|---:|---:|");
    for (ty, c) in &r.by_type {
        println!("| {ty} | {} | {} | {} |", c.tensors, c.bytes, c.params);
    }
}

fn print_types(r: &synth::SynthReport) {
    println!(
        "{:<6} {:>8} {:>14} {:>16}",
        "type", "tensors", "bytes", "params"
    );
    for (ty, c) in &r.by_type {
        println!(
            "{:<6} {:>8} {:>14} {:>16}",
            ty, c.tensors, c.bytes, c.params
        );
    }
}
