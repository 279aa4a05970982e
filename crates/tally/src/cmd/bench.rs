//! `tally bench`: prefill and decode throughput like llama-bench (pp512, pp2048, pp8192, tg128),
//! noise-gated, optionally side by side with llama.cpp in one run.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tally_ledger::e2e::{E2eConfig, E2eReport, e2e, e2e_pair};
use tally_ledger::noise::NoiseConfig;
use tally_ledger::subject::Subject;

use super::common::{VERSION, machine, open_model, tally_subject, write_file};
use super::measure::Common;
use super::{Format, InputError};

/// Prefill (ppN) and decode (tgN) throughput, llama-bench style, noise-gated.
///
/// Each test runs in gated windows (warm-up first, repeats, a busy machine's windows discarded
/// and re-measured); rows show the mean and standard deviation of tokens/s as llama-bench does,
/// plus the median. With --peer llama.cpp both engines run interleaved, window by window.
///
/// Example: tally bench --model m.gguf --backend cuda -p 512,2048,8192 -n 128 -r 5 -o md
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    model: std::path::PathBuf,
    /// Prompt lengths of the prefill tests.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    prompts: Vec<usize>,
    /// Tokens of the decode test (0: none).
    #[arg(short = 'n', long = "gen", default_value_t = 128)]
    n_gen: usize,
    /// Clean windows per test.
    #[arg(short = 'r', long, default_value_t = 5)]
    repeats: usize,
    #[arg(long, default_value = "cpu")]
    backend: String,
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Also run llama.cpp on the same file, interleaved.
    #[arg(long)]
    peer: Option<String>,
    #[arg(long, default_value = "tally-out")]
    out_dir: std::path::PathBuf,
    #[arg(short = 'o', long, value_enum, default_value = "md")]
    output: Format,
}

#[derive(Serialize)]
struct Row {
    engine: String,
    backend: String,
    test: String,
    tokens: u64,
    samples: usize,
    tok_s_mean: f64,
    tok_s_std: f64,
    tok_s_median: f64,
    median_ms: f64,
    /// Windows the noise gate threw away and re-measured (warm-up windows not counted).
    discarded_windows: usize,
    /// Why, each distinct reason once.
    discard_reasons: Vec<String>,
    /// The gate ran out of retries: the samples it kept may come from a busy machine.
    gate_exhausted: bool,
}

fn row(r: &E2eReport, backend: &str) -> Vec<Row> {
    let mut out = Vec::new();
    let mk = |test: String, tokens: u64, samples: &[f64], g: &tally_ledger::gate::GroupRecord| {
        let ts: Vec<f64> = samples.iter().map(|ms| tokens as f64 * 1e3 / ms).collect();
        let n = ts.len().max(1) as f64;
        let mean = ts.iter().sum::<f64>() / n;
        let var = ts.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let med = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        Row {
            engine: r.engine.clone(),
            backend: backend.to_string(),
            test,
            tokens,
            samples: samples.len(),
            tok_s_mean: mean,
            tok_s_std: var.sqrt(),
            tok_s_median: if med > 0.0 {
                tokens as f64 * 1e3 / med
            } else {
                0.0
            },
            median_ms: med,
            discarded_windows: g.discards(),
            discard_reasons: g.discard_reasons(),
            gate_exhausted: g.exhausted,
        }
    };
    if r.n_tokens > 1 || r.decode.is_none() {
        let s = r.prefill.group.samples_ms(0);
        out.push(mk(
            format!("pp{}", r.n_tokens),
            r.n_tokens,
            &s,
            &r.prefill.group,
        ));
    }
    if let Some(d) = &r.decode {
        let s = d.series.group.samples_ms(0);
        out.push(mk(format!("tg{}", d.n_gen), d.n_gen, &s, &d.series.group));
    }
    out
}

pub fn main(a: Args) -> Result<()> {
    let model = open_model(&a.model)?;
    let max_ctx = a
        .prompts
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1 + a.n_gen);
    let t0 = Instant::now();
    let mut ours = tally_subject(&model, &a.backend, a.threads, max_ctx, true)?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut peer: Option<Box<dyn Subject>> = match a.peer.as_deref() {
        None => None,
        Some("llama.cpp") | Some("llama") => {
            let c = peer_common(&a);
            Some(super::peer::open_llama(&c)?)
        }
        Some(other) => return Err(InputError(format!("unknown peer `{other}`")).into()),
    };
    let noise = NoiseConfig {
        windows: a.repeats.max(3),
        // Two untimed windows on a GPU: llama.cpp captures its CUDA graph on the third call.
        warmup_windows: if a.backend == "cuda" { 2 } else { 1 },
        ..NoiseConfig::default()
    };
    let mut tests: Vec<E2eConfig> = a
        .prompts
        .iter()
        .map(|&p| E2eConfig {
            n_tokens: p,
            n_gen: 0,
            seed: 0x5EED,
            noise: noise.clone(),
        })
        .collect();
    if a.n_gen > 0 {
        tests.push(E2eConfig {
            n_tokens: 1,
            n_gen: a.n_gen,
            seed: 0x5EED,
            noise: noise.clone(),
        });
    }
    let mut rows = Vec::new();
    for cfg in &tests {
        match peer.as_mut() {
            Some(p) => {
                let (ra, rb) = e2e_pair(&mut ours, p.as_mut(), cfg)?;
                let pb = p.info().backend;
                rows.extend(row(&ra, &a.backend));
                rows.extend(row(&rb, &pb));
            }
            None => rows.extend(row(&e2e(&mut ours, cfg)?, &a.backend)),
        }
    }
    let mem = tally_engine::Backend::memory_in_use(&ours.session.backend);
    let peak = tally_engine::Backend::memory_peak(&ours.session.backend);
    let facts = serde_json::json!({
        "tally": VERSION,
        "model": a.model.display().to_string(),
        "model_bytes": model.file.file_bytes(),
        "device": ours.session.backend.device(),
        "load_seconds": load_s,
        "device_memory_in_use_bytes": mem,
        "tally_device_memory_peak_bytes": peak,
        "machine": machine(&a.backend),
        "rows": rows,
    });
    write_file(
        &a.out_dir,
        "bench.json",
        &serde_json::to_string_pretty(&facts)?,
    )?;
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&facts)?),
        Format::Md | Format::Text => {
            let bytes = model.file.file_bytes() as f64;
            let size = if bytes >= (1u64 << 30) as f64 {
                format!("{:.2} GiB", bytes / (1u64 << 30) as f64)
            } else {
                format!("{:.2} MiB", bytes / (1u64 << 20) as f64)
            };
            println!(
                "| engine | model | size | backend | test | t/s | median t/s | windows (discarded) |"
            );
            println!("|---|---|---:|---|---:|---:|---:|---:|");
            for r in &rows {
                println!(
                    "| {} | qwen35moe {} layers | {} | {} | {} | {:.2} ± {:.2} | {:.2} | {} ({}{}) |",
                    r.engine,
                    model.config.n_layers,
                    size,
                    r.backend,
                    r.test,
                    r.tok_s_mean,
                    r.tok_s_std,
                    r.tok_s_median,
                    r.samples,
                    r.discarded_windows,
                    if r.gate_exhausted {
                        ", retries exhausted: noisy"
                    } else {
                        ""
                    }
                );
            }
            for r in rows.iter().filter(|r| !r.discard_reasons.is_empty()) {
                println!(
                    "discarded in {} {}: {}",
                    r.engine,
                    r.test,
                    r.discard_reasons.join("; ")
                );
            }
            let gib = |b: Option<u64>| {
                b.map(|b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_else(|| "n/a".into())
            };
            let whole = if peer.is_some() {
                "whole device, both engines"
            } else {
                "whole device"
            };
            println!(
                "\ntally {VERSION}; load {load_s:.2} s; tally's device allocations peak {}; \
                 device memory in use {} ({whole})",
                gib(peak),
                gib(mem)
            );
        }
    }
    Ok(())
}

fn peer_common(a: &Args) -> Common {
    Common {
        model: Some(a.model.clone()),
        tokens: a.prompts.first().copied().unwrap_or(512),
        decode: a.n_gen,
        backend: a.backend.clone(),
        threads: a.threads,
        repeats: a.repeats,
        op_reps: 10,
        routing: "realistic".into(),
        busy_limit: 0.5,
        out_dir: a.out_dir.clone(),
        output: a.output,
    }
}
