//! `tally bench`: prefill and decode throughput like llama-bench (pp512, pp2048, pp8192, tg128),
//! noise-gated, optionally side by side with llama.cpp in one run.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tally_ledger::e2e::{E2eConfig, E2eReport, e2e, e2e_pair};
use tally_ledger::gate::GroupRecord;
use tally_ledger::noise::NoiseConfig;
use tally_ledger::subject::Subject;

use super::common::{VERSION, machine, open_model, tally_subject, write_file};
use super::measure::Common;
use super::{Format, InputError, NoVerdict, checks};

mod spec;

/// Prefill (ppN) and decode (tgN) throughput, llama-bench style, noise-gated.
///
/// Columns and JSON fields follow llama-bench (model, size, params, backend, threads, fa, test,
/// t/s as mean ± sample stddev of per-window tokens/s; `avg_ts`, `stddev_ts`, `samples_ts`,
/// `n_prompt`, `n_gen`, `model_type`, `model_size`, `model_n_params`, `build_commit`...), so a
/// table can be read line by line against llama-bench's. Each test runs in gated windows
/// (warm-up first, repeats, a busy machine's windows discarded and re-measured). With --peer
/// llama.cpp both engines run interleaved, window by window, and tally's rows get a ratio column.
/// A decode step ends as in a generation: tally's greedy sampler picks a token on the backend
/// (on CUDA only the id is downloaded), llama.cpp's decode copies its logits to the host as it
/// always does; the next step waits for it, and the token fed is a random one.
/// Exit code 3 when the noise gate ran out of retries on any test (the rows say which).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  tally bench -m tiny.gguf -p 64 -n 16 -r 5
  tally bench -m qwen35moe-q4km.gguf --backend cuda -p 512 -n 128 -d 0,8192,32768 --peer llama.cpp
  tally bench -m qwen35moe-q4km.gguf --backend cuda -p 512,2048,8192 -n 128 --peer llama.cpp -o md
  tally bench -m tiny.gguf -o jsonl > bench.jsonl")]
pub struct Args {
    /// The qwen35moe GGUF file (`-m` as in llama-bench).
    #[arg(short = 'm', long)]
    model: std::path::PathBuf,
    /// Prompt lengths of the prefill tests (ppN), comma-separated.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    prompts: Vec<usize>,
    /// Tokens of the decode test (tgN; 0: none).
    #[arg(short = 'n', long = "gen", default_value_t = 128)]
    n_gen: usize,
    /// Depths of the decode test, comma-separated (llama-bench's `-d`): `tgN @ dD` times N
    /// decode steps after an untimed prefill of D tokens, so each step attends over D cached
    /// tokens and runs the recurrent layers from a state D tokens deep. 0: after one token.
    /// The ppN tests always start from an empty context.
    #[arg(
        short = 'd',
        long = "depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    depths: Vec<usize>,
    /// Clean windows per test (at least 3: the noise gate's outlier test needs a spread).
    #[arg(short = 'r', long, default_value_t = 5)]
    repeats: usize,
    /// tally's backend: cpu or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// tally's physical batch (llama-bench's `-ub`): a longer prompt runs as consecutive
    /// batches of this many tokens, so activation memory is bounded by the batch (0: the whole
    /// prompt as one batch). The llama.cpp peer keeps llama-bench's defaults (`n_batch` 2048,
    /// `n_ubatch` 512).
    #[arg(long = "ubatch", visible_alias = "ub", default_value_t = tally_engine::DEFAULT_UBATCH)]
    ubatch: usize,
    /// CPU threads (0: one per core; at most four per core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Also run this engine on the same file, interleaved: llama.cpp.
    #[arg(long)]
    peer: Option<String>,
    /// Cores other processes may keep busy during a timing window before the noise gate
    /// discards and re-measures it.
    #[arg(long, default_value_t = 0.5)]
    busy_limit: f64,
    /// Directory for bench.json (every field, every window).
    #[arg(long, default_value = "tally-out")]
    out_dir: std::path::PathBuf,
    /// Also time speculative decoding of the tgN test, at each depth of -d: `mtp` (the file's
    /// multi-token-prediction head drafts, greedily; with --replay-acceptance, replayed drafts
    /// stand in for it).
    #[arg(long, value_parser = ["mtp"])]
    spec: Option<String>,
    /// Drafts verified per step with --spec (k).
    #[arg(long, default_value_t = 3)]
    draft_max: usize,
    /// With --spec: draft from tally's own greedy continuation, each drafted token right with
    /// this probability (a controlled acceptance rate, independent of the draft head: synthetic
    /// files have random MTP weights). The file's MTP block is then neither used nor needed.
    #[arg(long)]
    replay_acceptance: Option<f64>,
    /// Output format: md (llama-bench's table), text, csv, json, jsonl.
    #[arg(short = 'o', long, value_enum, default_value = "md")]
    output: BenchFormat,
}

/// The llama.cpp peer's `n_batch` and `n_ubatch`: llama-bench's defaults, which
/// `tally_peer_llama::PeerParams::default()` keeps.
const PEER_BATCHES: (usize, usize) = (2048, 512);

/// `tally bench` output formats (llama-bench's, plus aligned text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchFormat {
    /// llama-bench's Markdown table.
    Md,
    /// Aligned columns for a terminal.
    Text,
    /// One header line and one line per test, llama-bench's field names.
    Csv,
    /// A JSON array of tests, llama-bench's field names.
    Json,
    /// One JSON object per line.
    Jsonl,
}

/// One test of one engine, with llama-bench's field names (where they overlap) first.
#[derive(Serialize, Clone)]
struct Row {
    build_commit: String,
    build_number: u32,
    cpu_info: String,
    gpu_info: String,
    backends: String,
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    flash_attn: u8,
    n_prompt: u64,
    n_gen: u64,
    n_depth: u64,
    test_time: String,
    avg_ns: u64,
    stddev_ns: u64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    // tally's own fields.
    engine: String,
    /// The engine's switches in effect, `name=value` (tally's backend options: GEMM path,
    /// graphs, threads), so a row says how it was run; empty for the peer.
    engine_options: Vec<String>,
    test: String,
    median_ts: f64,
    /// tally's mean t/s over the peer's on the same test (tally's rows, with --peer).
    ratio_to_peer: Option<f64>,
    /// Windows the noise gate threw away and re-measured (warm-up windows not counted).
    discarded_windows: usize,
    /// Why, each distinct reason once.
    discard_reasons: Vec<String>,
    /// The gate ran out of retries: the samples it kept may come from a busy machine.
    gate_exhausted: bool,
    /// Speculative decoding rows (`--spec`): what was drafted and kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<SpecRow>,
}

/// The speculative part of a `--spec` row.
#[derive(Serialize, Clone)]
struct SpecRow {
    /// `mtp` with replayed drafts: `replay`.
    draft: String,
    draft_max: usize,
    /// The replayed drafts' chance of being right (given the previous one was).
    target_acceptance: Option<f64>,
    /// Measured: kept drafts over kept drafts plus rejections, and over drafts proposed.
    conditional_acceptance: f64,
    acceptance: f64,
    /// Plain greedy decoding of the same tokens in the same windows, and the ratio.
    plain_avg_ts: f64,
    speedup: f64,
    /// Seconds per window in each part (medians).
    verify_s: f64,
    save_s: f64,
    recompute_s: f64,
    steps: usize,
    /// Rejections handled from the kept per-token states, and by a restore and a recompute
    /// (the last window's).
    rollbacks: usize,
    recomputes: usize,
}

/// What every row of one engine shares.
struct Facts {
    build_commit: String,
    cpu_info: String,
    gpu_info: String,
    backends: String,
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    flash_attn: u8,
    test_time: String,
    options: Vec<String>,
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// One row from its timed windows: `tokens` tokens in each of `samples_ms`.
fn row(
    f: &Facts,
    engine: &str,
    test: String,
    (n_prompt, n_gen, tokens): (u64, u64, u64),
    samples_ms: &[f64],
) -> Row {
    let ts: Vec<f64> = samples_ms
        .iter()
        .map(|ms| tokens as f64 * 1e3 / ms)
        .collect();
    let ns: Vec<u64> = samples_ms.iter().map(|ms| (ms * 1e6) as u64).collect();
    let (avg_ts, stddev_ts) = mean_sd(&ts);
    let (avg_ms, sd_ms) = mean_sd(samples_ms);
    let mut sorted = samples_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let med = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    Row {
        build_commit: f.build_commit.clone(),
        build_number: 0,
        cpu_info: f.cpu_info.clone(),
        gpu_info: f.gpu_info.clone(),
        backends: f.backends.clone(),
        model_filename: f.model_filename.clone(),
        model_type: f.model_type.clone(),
        model_size: f.model_size,
        model_n_params: f.model_n_params,
        n_batch: f.n_batch,
        n_ubatch: f.n_ubatch,
        n_threads: f.n_threads,
        flash_attn: f.flash_attn,
        n_prompt,
        n_gen,
        n_depth: 0,
        test_time: f.test_time.clone(),
        avg_ns: (avg_ms * 1e6) as u64,
        stddev_ns: (sd_ms * 1e6) as u64,
        avg_ts,
        stddev_ts,
        samples_ns: ns,
        samples_ts: ts,
        engine: engine.to_string(),
        engine_options: f.options.clone(),
        test,
        median_ts: if med > 0.0 {
            tokens as f64 * 1e3 / med
        } else {
            0.0
        },
        ratio_to_peer: None,
        discarded_windows: 0,
        discard_reasons: Vec::new(),
        gate_exhausted: false,
        spec: None,
    }
}

fn rows_of(r: &E2eReport, f: &Facts) -> Vec<Row> {
    let mk = |n_prompt: u64, n_gen: u64, g: &GroupRecord| {
        let test = if n_gen == 0 {
            format!("pp{n_prompt}")
        } else {
            format!("tg{n_gen}")
        };
        let counts = (n_prompt, n_gen, n_prompt + n_gen);
        Row {
            discarded_windows: g.discards(),
            discard_reasons: g.discard_reasons(),
            gate_exhausted: g.exhausted,
            ..row(f, &r.engine, test, counts, &g.samples_ms(0))
        }
    };
    let mut out = Vec::new();
    let timed_prefill = !r.prefill.group.windows.is_empty();
    if timed_prefill && (r.n_tokens > 1 || r.decode.is_none()) {
        out.push(mk(r.n_tokens, 0, &r.prefill.group));
    }
    if let Some(d) = &r.decode {
        // llama-bench's tgN times N decodes after a warm-up token: n_prompt 0. At depth D
        // (no prefill series) its test is `tgN @ dD` and n_depth D.
        let mut row = mk(0, d.n_gen, &d.series.group);
        if !timed_prefill {
            row.n_depth = r.n_tokens;
            row.test = format!("tg{} @ d{}", d.n_gen, r.n_tokens);
        }
        out.push(row);
    }
    out
}

/// llama.cpp's `general.file_type` names (llama_model_ftype_name), for the model column.
fn ftype_name(ft: Option<u64>) -> String {
    match ft {
        Some(0) => "all F32".into(),
        Some(1) => "F16".into(),
        Some(2) => "Q4_0".into(),
        Some(3) => "Q4_1".into(),
        Some(7) => "Q8_0".into(),
        Some(8) => "Q5_0".into(),
        Some(9) => "Q5_1".into(),
        Some(10) => "Q2_K - Medium".into(),
        Some(12) => "Q3_K - Medium".into(),
        Some(14) => "Q4_K - Small".into(),
        Some(15) => "Q4_K - Medium".into(),
        Some(17) => "Q5_K - Medium".into(),
        Some(18) => "Q6_K".into(),
        Some(25) => "IQ4_NL - 4.5 bpw".into(),
        Some(30) => "IQ4_XS - 4.25 bpw".into(),
        Some(32) => "BF16".into(),
        Some(38) => "MXFP4 MoE".into(),
        Some(n) => format!("ftype {n}"),
        None => "?".into(),
    }
}

/// `qwen35moe 35B.A3B Q4_K - Medium` as llama.cpp's model description; other shapes get `?B`,
/// llama.cpp's label for a size it has no name for.
fn model_type(model: &tally_model::Model) -> String {
    let c = &model.config;
    let real = tally_model::synth::Preset::Full35bA3b.config();
    let size = if c.n_layers == real.n_layers
        && c.hidden == real.hidden
        && c.n_experts == real.n_experts
    {
        "35B.A3B"
    } else {
        "?B"
    };
    let ft = model.file.get("general.file_type").and_then(|v| v.as_u64());
    format!("{} {size} {}", tally_model::config::ARCH, ftype_name(ft))
}

fn size_label(bytes: u64) -> String {
    let b = bytes as f64;
    if b < (1u64 << 30) as f64 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    }
}

fn params_label(n: u64) -> String {
    if n < 1_000_000_000 {
        format!("{:.2} M", n as f64 / 1e6)
    } else {
        format!("{:.2} B", n as f64 / 1e9)
    }
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The table's columns: (header, right-aligned, cell).
type Column = (&'static str, bool, fn(&Row) -> String);

fn columns(with_peer: bool) -> Vec<Column> {
    let mut c: Vec<Column> = Vec::new();
    if with_peer {
        c.push(("engine", false, |r| r.engine.clone()));
    }
    c.push(("model", false, |r| r.model_type.clone()));
    c.push(("size", true, |r| size_label(r.model_size)));
    c.push(("params", true, |r| params_label(r.model_n_params)));
    c.push(("backend", false, |r| r.backends.clone()));
    c.push(("threads", true, |r| r.n_threads.to_string()));
    c.push(("fa", true, |r| r.flash_attn.to_string()));
    c.push(("test", true, |r| r.test.clone()));
    c.push(("t/s", true, |r| {
        let mark = if r.gate_exhausted { " (noisy)" } else { "" };
        format!("{:.2} ± {:.2}{mark}", r.avg_ts, r.stddev_ts)
    }));
    if with_peer {
        c.push(("ratio", true, |r| {
            r.ratio_to_peer
                .map_or(String::new(), |x| format!("{x:.2}x"))
        }));
    }
    c
}

fn render_table(rows: &[Row], with_peer: bool, md: bool) -> String {
    let cols = columns(with_peer);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| cols.iter().map(|c| (c.2)(r)).collect())
        .collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|row| row[i].chars().count())
            .chain([cols[i].0.len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols.len()).map(width).collect();
    let pad = |s: &str, w: usize, right: bool| {
        let n = w.saturating_sub(s.chars().count());
        if right {
            format!("{}{s}", " ".repeat(n))
        } else {
            format!("{s}{}", " ".repeat(n))
        }
    };
    let line = |vals: Vec<String>| -> String {
        if md {
            format!("| {} |", vals.join(" | "))
        } else {
            vals.join("  ").trim_end().to_string()
        }
    };
    let mut out = Vec::new();
    out.push(line(
        cols.iter()
            .enumerate()
            .map(|(i, c)| pad(c.0, widths[i], c.1))
            .collect(),
    ));
    if md {
        out.push(line(
            cols.iter()
                .enumerate()
                .map(|(i, c)| {
                    let dashes = "-".repeat(widths[i].saturating_sub(1));
                    if c.1 {
                        format!("{dashes}:")
                    } else {
                        format!("{dashes}-")
                    }
                })
                .collect(),
        ));
    }
    for row in &cells {
        out.push(line(
            row.iter()
                .enumerate()
                .map(|(i, v)| pad(v, widths[i], cols[i].1))
                .collect(),
        ));
    }
    out.join("\n")
}

fn csv_field(v: &serde_json::Value) -> String {
    let s = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// CSV columns: llama-bench's fields in its order (those tally has), then tally's own.
const CSV_FIELDS: [&str; 27] = [
    "build_commit",
    "build_number",
    "cpu_info",
    "gpu_info",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "flash_attn",
    "n_prompt",
    "n_gen",
    "n_depth",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
    "engine",
    "test",
    "median_ts",
    "ratio_to_peer",
    "discarded_windows",
    "gate_exhausted",
];

fn render_csv(rows: &[Row]) -> Result<String> {
    let mut out = vec![CSV_FIELDS.join(",")];
    for r in rows {
        let v = serde_json::to_value(r)?;
        let cells: Vec<String> = CSV_FIELDS
            .iter()
            .map(|k| csv_field(v.get(*k).unwrap_or(&serde_json::Value::Null)))
            .collect();
        out.push(cells.join(","));
    }
    Ok(out.join("\n"))
}

pub fn main(a: Args) -> Result<()> {
    checks::backend(&a.backend)?;
    checks::threads(a.threads)?;
    checks::repeats(a.repeats)?;
    let model = open_model(&a.model)?;
    let context = model.config.context_length;
    for &p in &a.prompts {
        checks::prompt_len("-p", p, context)?;
    }
    for &d in &a.depths {
        checks::total_len(d.max(1), a.n_gen, context)?;
    }
    if a.n_gen == 0 && a.depths.iter().any(|&d| d > 0) {
        return Err(InputError("-d times the tgN test: give -n 1 or more".into()).into());
    }
    if let Some(acc) = a.replay_acceptance
        && !(0.0..=1.0).contains(&acc)
    {
        return Err(InputError(format!(
            "--replay-acceptance {acc}: a probability in [0, 1]"
        ))
        .into());
    }
    if a.spec.is_some() {
        if a.n_gen < 2 {
            return Err(InputError("--spec times the tgN test: give -n 2 or more".into()).into());
        }
        if a.draft_max == 0 || a.draft_max > 16 {
            return Err(InputError(format!(
                "--draft-max {}: 1 to 16 drafts per step",
                a.draft_max
            ))
            .into());
        }
        if a.replay_acceptance.is_none() && model.mtp.is_empty() {
            return Err(InputError(format!(
                "--spec mtp: {} has no MTP block (qwen35moe.nextn_predict_layers is 0); give \
                 --replay-acceptance A to time the verification pipeline with replayed drafts",
                a.model.display()
            ))
            .into());
        }
    }
    let max_ctx = a
        .prompts
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(a.depths.iter().copied().max().unwrap_or(0).max(1) + a.n_gen);
    let t0 = Instant::now();
    let mut ours = tally_subject(&model, &a.backend, a.threads, max_ctx, true)?;
    ours.session.ubatch = a.ubatch;
    let load_s = t0.elapsed().as_secs_f64();
    let mut peer: Option<Box<dyn Subject>> = match a.peer.as_deref() {
        None => None,
        Some("llama.cpp") | Some("llama") => {
            let c = peer_common(&a);
            Some(super::peer::open_llama(&c)?)
        }
        Some(other) => {
            return Err(InputError(format!("--peer {other}: unknown peer (llama.cpp)")).into());
        }
    };
    let noise = NoiseConfig {
        windows: a.repeats,
        // Two untimed windows on a GPU: llama.cpp captures its CUDA graph on the third call.
        warmup_windows: if a.backend == "cuda" { 2 } else { 1 },
        max_other_busy_cores: a.busy_limit,
        ..NoiseConfig::default()
    };
    let mut tests: Vec<E2eConfig> = a
        .prompts
        .iter()
        .map(|&p| E2eConfig {
            n_tokens: p,
            n_past: 0,
            n_gen: 0,
            time_prefill: true,
            seed: 0x5EED,
            noise: noise.clone(),
        })
        .collect();
    // Each tgN depth once (the plain rows and the speculative ones).
    let mut depths = a.depths.clone();
    depths.dedup();
    if a.n_gen > 0 {
        for &d in &depths {
            // Depth 0 is llama-bench's plain tgN: one prompt token first (tally needs a
            // prefill before it decodes), which the prefill series also times, as before.
            tests.push(E2eConfig {
                n_tokens: d.max(1),
                n_past: 0,
                n_gen: a.n_gen,
                time_prefill: d == 0,
                seed: 0x5EED,
                noise: noise.clone(),
            });
        }
    }
    let mach = machine(&a.backend);
    let gpu_info = mach
        .gpu
        .as_ref()
        .map(|g| g.name.clone())
        .unwrap_or_default();
    let tensors = model.file.tensors();
    let facts =
        |engine: &str, backend: String, threads: Option<usize>, batches: (usize, usize)| Facts {
            build_commit: if engine == "tally" {
                VERSION.to_string()
            } else {
                engine.to_string()
            },
            cpu_info: mach.cpu_model.clone(),
            gpu_info: gpu_info.clone(),
            backends: backend,
            model_filename: a.model.display().to_string(),
            model_type: model_type(&model),
            model_size: tensors.iter().map(|t| t.n_bytes()).sum(),
            model_n_params: tensors.iter().map(|t| t.n_elems()).sum(),
            n_batch: batches.0,
            n_ubatch: batches.1,
            n_threads: threads.unwrap_or(0),
            // tally's attention is one fused node (scores never stored as a tensor); the peer
            // runs with llama.cpp's flash attention on (the peer's default).
            flash_attn: 1,
            test_time: now_rfc3339(),
            options: Vec::new(),
        };
    let ours_facts = Facts {
        options: tally_engine::Backend::options(&ours.session.backend),
        ..facts(
            "tally",
            a.backend.clone(),
            tally_engine::Backend::threads(&ours.session.backend),
            (a.ubatch, a.ubatch),
        )
    };
    let mut rows = Vec::new();
    for cfg in &tests {
        match peer.as_mut() {
            Some(p) => {
                let (ra, rb) = e2e_pair(&mut ours, p.as_mut(), cfg)?;
                let info = p.info();
                let pf = facts(
                    &format!("{} {}", info.engine, info.version),
                    info.backend.clone(),
                    info.threads,
                    PEER_BATCHES,
                );
                let mut ta = rows_of(&ra, &ours_facts);
                let tb = rows_of(&rb, &pf);
                for (x, y) in ta.iter_mut().zip(&tb) {
                    if y.avg_ts > 0.0 {
                        x.ratio_to_peer = Some(x.avg_ts / y.avg_ts);
                    }
                }
                rows.extend(ta);
                rows.extend(tb);
            }
            None => rows.extend(rows_of(&e2e(&mut ours, cfg)?, &ours_facts)),
        }
    }
    if a.spec.is_some() {
        // One speculative row per depth, as the plain tgN rows.
        for &d in &depths {
            rows.push(spec::spec_row(
                &mut ours.session,
                &ours_facts,
                &a,
                a.replay_acceptance,
                d,
            )?);
        }
    }
    let mem = tally_engine::Backend::memory_in_use(&ours.session.backend);
    let peak = tally_engine::Backend::memory_peak(&ours.session.backend);
    let file = serde_json::json!({
        "tally": VERSION,
        "model": a.model.display().to_string(),
        "model_bytes": model.file.file_bytes(),
        "device": ours.session.backend.device(),
        "load_seconds": load_s,
        "device_memory_in_use_bytes": mem,
        "tally_device_memory_peak_bytes": peak,
        "machine": mach,
        "rows": rows,
    });
    write_file(
        &a.out_dir,
        "bench.json",
        &serde_json::to_string_pretty(&file)?,
    )?;
    let noisy: Vec<String> = rows
        .iter()
        .filter(|r| r.gate_exhausted)
        .map(|r| format!("{} {}", r.engine, r.test))
        .collect();
    match a.output {
        BenchFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        BenchFormat::Jsonl => {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        }
        BenchFormat::Csv => println!("{}", render_csv(&rows)?),
        BenchFormat::Md | BenchFormat::Text => {
            let md = a.output == BenchFormat::Md;
            println!("{}", render_table(&rows, peer.is_some(), md));
            for r in rows.iter().filter(|r| !r.discard_reasons.is_empty()) {
                println!(
                    "\nnoise gate, {} {}: {} windows discarded ({}){}",
                    r.engine,
                    r.test,
                    r.discarded_windows,
                    r.discard_reasons.join("; "),
                    if r.gate_exhausted {
                        "; retries exhausted: (noisy) figures may come from a busy machine"
                    } else {
                        ""
                    }
                );
            }
            for r in &rows {
                if let Some(sp) = &r.spec {
                    println!(
                        "\nspeculative, {} {}: drafts {} (target acceptance {}), kept {:.2} given \
                         the previous ({:.2} of all drafted) over {} steps; {:.2} t/s vs {:.2} t/s \
                         plain greedy in the same windows: {:.2}x; per window verify {:.3} s, \
                         save {:.3} s, restore + recompute (or roll back) {:.3} s; {} rollbacks, \
                         {} recomputes",
                        r.engine,
                        r.test,
                        sp.draft,
                        sp.target_acceptance
                            .map_or("-".to_string(), |x| format!("{x:.2}")),
                        sp.conditional_acceptance,
                        sp.acceptance,
                        sp.steps,
                        r.avg_ts,
                        sp.plain_avg_ts,
                        sp.speedup,
                        sp.verify_s,
                        sp.save_s,
                        sp.recompute_s,
                        sp.rollbacks,
                        sp.recomputes
                    );
                }
            }
            let gib = |b: Option<u64>| {
                b.map(|b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_else(|| "n/a".into())
            };
            println!(
                "\nload {load_s:.2} s; tally's device allocations peak {}; device memory in use {}",
                gib(peak),
                gib(mem)
            );
            println!("\nbuild: tally {VERSION}");
        }
    }
    if !noisy.is_empty() {
        return Err(NoVerdict(format!(
            "the noise gate ran out of retries on {}: those rows are marked (noisy); measure on a \
             quieter machine",
            noisy.join(", ")
        ))
        .into());
    }
    Ok(())
}

fn peer_common(a: &Args) -> Common {
    Common {
        model: Some(a.model.clone()),
        tokens: a.prompts.first().copied().unwrap_or(512),
        step_at: None,
        decode: a.n_gen,
        backend: a.backend.clone(),
        threads: a.threads,
        repeats: a.repeats,
        max_retries: tally_ledger::noise::NoiseConfig::default().max_retries,
        best_of: 1,
        outlier_floor: tally_ledger::noise::NoiseConfig::default().outlier_floor_ratio,
        op_reps: 10,
        routing: "realistic".into(),
        busy_limit: a.busy_limit,
        out_dir: a.out_dir.clone(),
        output: Format::Text,
    }
}

#[cfg(test)]
mod ftype_tests {
    /// Every mix `tally synth` writes has llama.cpp's file-type name in the model column (the
    /// numbers are llama.h's LLAMA_FTYPE_MOSTLY_*; the names its llama_model_ftype_name).
    #[test]
    fn every_synth_mix_has_llama_cpps_file_type_name() {
        use tally_model::synth::QuantMix;
        for name in QuantMix::NAMES {
            let mix = QuantMix::parse(name).expect("a mix");
            let n = super::ftype_name(Some(u64::from(mix.file_type())));
            assert!(!n.starts_with("ftype"), "{name}: {n}");
        }
        assert_eq!(super::ftype_name(Some(30)), "IQ4_XS - 4.25 bpw");
        assert_eq!(super::ftype_name(Some(38)), "MXFP4 MoE");
        assert_eq!(super::ftype_name(Some(99)), "ftype 99");
    }
}

#[cfg(all(test, feature = "llama"))]
mod tests {
    /// The peer's rows report the batches the peer really runs with.
    #[test]
    fn peer_batches_are_the_peers_defaults() {
        let p = tally_peer_llama::PeerParams::default();
        assert_eq!(
            super::PEER_BATCHES,
            (p.n_batch as usize, p.n_ubatch as usize)
        );
    }
}
