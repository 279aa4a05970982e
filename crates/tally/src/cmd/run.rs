//! `tally run`: prefill a prompt (and decode) on a backend, print timings and the top logits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tally_engine::Session;
use tally_engine::exec::Capture;
use tally_engine::finite::first_non_finite;
use tally_engine::subject::model_routing_of;
use tally_ledger::routing::{ExpertHistogram, ModelRouting, expert_histogram, route};
use tally_ledger::schema::Routing;
use tally_model::rng::Rng;
use tally_model::{Op, Plan};

use super::common::open_model;
use super::{Format, InputError, checks};

/// Prefill a prompt of token ids and decode greedily; prints timings and the top logits.
///
/// Example: tally run --model tiny.gguf --tokens 64 -n 8
#[derive(clap::Args)]
pub struct Args {
    /// The qwen35moe GGUF file (of a split model, the first part: NAME-00001-of-0000N.gguf).
    #[arg(long)]
    model: PathBuf,
    /// A prompt of N random token ids (deterministic by --seed).
    #[arg(long, conflicts_with = "token_ids")]
    tokens: Option<usize>,
    /// A prompt of explicit token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    token_ids: Option<Vec<u32>>,
    /// Tokens to decode after the prompt (greedy).
    #[arg(short = 'n', long, default_value_t = 0)]
    decode: usize,
    /// Backend: cpu (reference) or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// CPU threads (0: one per core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Seed of the random prompt.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many top logits to print.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Physical batch: a longer prompt runs as consecutive batches of this many tokens
    /// (llama.cpp's `n_ubatch`; 0: the whole prompt as one batch).
    #[arg(long = "ubatch", visible_alias = "ub", default_value_t = tally_engine::DEFAULT_UBATCH)]
    ubatch: usize,
    /// Also report how the router spread the prompt over the experts in each MoE layer
    /// (experts touched, the busiest expert's rows, tiles of 32 rows), beside a uniform routing
    /// of as many tokens (the ledger's `realistic` table). The prefill then runs with an
    /// observer (whole prompt, one batch): its time includes reading the routing back.
    #[arg(long)]
    routing: bool,
    /// With --routing: also write the model's routing of the prompt in its median MoE layer
    /// (by busiest expert, the table the ledger's standalone MoE timings use) to FILE, as text:
    /// `#` comments, a line `tokens k experts`, then a line of k expert ids per token. The lab
    /// times its MoE kernels on it (`LAB_ROUTING=FILE`, lab/gemm/README.md).
    #[arg(long, value_name = "FILE", requires = "routing")]
    routing_table: Option<PathBuf>,
    /// Report format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

/// One MoE layer's routing of the prompt (`--routing`).
#[derive(Serialize)]
struct LayerRouting {
    /// The top-k node.
    node: String,
    experts_touched: usize,
    max_rows: u64,
    mean_rows_per_touched: f64,
    /// Tiles of up to 32 rows (ceil(rows / 32) summed over the experts): the CUDA MoE tiles of
    /// short prompts.
    tiles32: u64,
}

impl LayerRouting {
    fn of(node: String, h: &ExpertHistogram) -> LayerRouting {
        LayerRouting {
            node,
            experts_touched: h.experts_touched,
            max_rows: h.max_tokens_per_expert,
            mean_rows_per_touched: h.mean_tokens_per_touched_expert,
            tiles32: h.tokens_per_expert.iter().map(|c| c.div_ceil(32)).sum(),
        }
    }
}

#[derive(Serialize)]
struct RoutingReport {
    experts: usize,
    experts_per_token: usize,
    /// Each MoE layer, in plan order.
    layers: Vec<LayerRouting>,
    /// The same figures for a uniform routing of as many tokens (seed 1).
    uniform: LayerRouting,
}

/// The prompt's routing in each MoE layer, read back after every top-k node of one hooked
/// prefill (the whole prompt as one batch).
fn routing_report(
    s: &mut Session<Box<dyn tally_engine::Backend>>,
    prompt: &[u32],
    plan: &Plan,
    experts: usize,
    k: usize,
) -> Result<(Vec<f32>, RoutingReport, ModelRouting)> {
    let mut cap = Capture::topk(plan, false);
    let (logits, _) = s.prefill_with(prompt, &mut cap)?;
    let rec = model_routing_of(plan, &cap, experts, k)?;
    let mut layers = Vec::new();
    for t in &rec.layers {
        let name = plan
            .nodes
            .iter()
            .find(|n| matches!(n.op, Op::TopK { .. }) && n.layer == Some(t.layer as usize))
            .map_or_else(|| format!("blk.{}", t.layer), |n| n.name.clone());
        layers.push(LayerRouting::of(name, &expert_histogram(&t.ids, experts)?));
    }
    let uniform = route(prompt.len(), experts, k, Routing::Realistic, 1)?;
    let uniform = LayerRouting::of("uniform".into(), &expert_histogram(&uniform, experts)?);
    Ok((
        logits,
        RoutingReport {
            experts,
            experts_per_token: k,
            layers,
            uniform,
        },
        rec,
    ))
}

/// `--routing-table`: the median layer's table as text (see the option's help).
fn write_routing_table(path: &Path, rec: &ModelRouting, what: &str) -> Result<()> {
    let t = rec
        .pick(&[], rec.n_tokens)
        .ok_or_else(|| anyhow::anyhow!("no MoE layer routed the whole prompt"))?;
    let busiest = expert_histogram(&t.ids, rec.n_experts)?.max_tokens_per_expert;
    let mut out = format!(
        "# tally routing table: the model's routing of {what}, layer {} (the median MoE layer by \
         busiest expert: {busiest} rows)\n# a line `tokens k experts`, then k expert ids a token\n{} {} {}\n",
        t.layer, t.n_tokens, rec.k, rec.n_experts
    );
    for tok in t.ids.chunks(rec.k) {
        let ids: Vec<String> = tok.iter().map(u32::to_string).collect();
        out.push_str(&ids.join(" "));
        out.push('\n');
    }
    std::fs::write(path, out)
        .map_err(|e| InputError(format!("writing {}: {e}", path.display())).into())
}

#[derive(Serialize)]
struct Report {
    model: String,
    load_ms: f64,
    backend: String,
    device: String,
    prompt_tokens: usize,
    ubatch: usize,
    /// The peak of tally's own device allocations (CUDA; absent on the CPU).
    device_memory_peak_bytes: Option<u64>,
    prefill_ms: f64,
    prefill_tokens_per_s: f64,
    decoded: Vec<u32>,
    decode_ms: f64,
    decode_tokens_per_s: f64,
    top_logits: Vec<(u32, f32)>,
    /// `--routing`: each MoE layer's spread of the prompt over the experts.
    #[serde(skip_serializing_if = "Option::is_none")]
    routing: Option<RoutingReport>,
    /// A hash of every bit of the logits: the prefill's, then each decode step's (two runs
    /// with equal digests computed bit-identical logits).
    logits_digests: Vec<String>,
}

/// The `top` largest logits (id, value), highest first.
pub fn top_k(logits: &[f32], top: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    idx.into_iter()
        .take(top)
        .map(|i| (i, logits[i as usize]))
        .collect()
}

pub fn main(a: Args) -> Result<()> {
    checks::backend(&a.backend)?;
    checks::threads(a.threads)?;
    let model = open_model(&a.model)?;
    let vocab = model.config.vocab;
    let context = model.config.context_length;
    // Lengths are checked before the prompt is allocated.
    let n_prompt = match (&a.token_ids, a.tokens) {
        (Some(ids), _) => checks::prompt_len("--token-ids", ids.len(), context)?,
        (None, Some(n)) => checks::prompt_len("--tokens", n, context)?,
        (None, None) => return Err(InputError("give --tokens N or --token-ids LIST".into()).into()),
    };
    let total = checks::total_len(n_prompt, a.decode, context)?;
    let prompt: Vec<u32> = match &a.token_ids {
        Some(ids) => ids.clone(),
        None => {
            let mut rng = Rng::new(a.seed);
            (0..n_prompt)
                .map(|_| rng.below(vocab as u64) as u32)
                .collect()
        }
    };
    let t_load = Instant::now();
    let backend = super::common::open_backend(&a.backend, model.clone(), a.threads)?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let device = backend.device();
    let mut s = Session::new(model.clone(), backend, total)?;
    s.ubatch = a.ubatch;
    let t0 = Instant::now();
    let (mut logits, routing) = if a.routing {
        let plan = s.plan(prompt.len())?;
        let c = &model.config;
        let (l, r, rec) = routing_report(&mut s, &prompt, &plan, c.n_experts, c.n_experts_used)?;
        if let Some(path) = &a.routing_table {
            let what = format!("a {}-token prompt of {}", prompt.len(), a.model.display());
            write_routing_table(path, &rec, &what)?;
        }
        (l, Some(r))
    } else {
        (s.prefill(&prompt)?, None)
    };
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    checks::finite_logits(&mut s, &prompt, &logits, "prefill")?;
    let top_logits = top_k(&logits, a.top);
    let hex = |l: &[f32]| format!("{:016x}", tally_engine::subject::digest(l));
    let mut logits_digests = vec![hex(&logits)];
    let mut decoded = Vec::new();
    let t1 = Instant::now();
    for _ in 0..a.decode {
        let next = top_k(&logits, 1).first().map(|x| x.0).unwrap_or(0);
        decoded.push(next);
        logits = s.decode(next)?;
        logits_digests.push(hex(&logits));
        if first_non_finite(&logits).is_some() {
            let n = decoded.len();
            checks::finite_logits(&mut s, &prompt, &logits, &format!("decode step {n}"))?;
        }
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    let r = Report {
        model: a.model.display().to_string(),
        load_ms,
        backend: a.backend.clone(),
        device,
        prompt_tokens: prompt.len(),
        ubatch: a.ubatch,
        device_memory_peak_bytes: tally_engine::Backend::memory_peak(&s.backend),
        prefill_ms,
        prefill_tokens_per_s: prompt.len() as f64 / (prefill_ms / 1e3),
        decoded,
        decode_ms,
        decode_tokens_per_s: if a.decode > 0 {
            a.decode as f64 / (decode_ms / 1e3)
        } else {
            0.0
        },
        top_logits,
        routing,
        logits_digests,
    };
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
        Format::Md | Format::Text => {
            let md = a.output == Format::Md;
            let mut facts = vec![
                ("model", r.model.clone()),
                (
                    "backend",
                    format!(
                        "{} on {} (loaded in {:.0} ms)",
                        r.backend, r.device, r.load_ms
                    ),
                ),
                (
                    "prefill",
                    format!(
                        "{} tokens in {:.2} ms ({:.1} tokens/s)",
                        r.prompt_tokens, r.prefill_ms, r.prefill_tokens_per_s
                    ),
                ),
            ];
            if a.decode > 0 {
                facts.push((
                    "decode",
                    format!(
                        "{} tokens in {:.2} ms ({:.1} tokens/s): {:?}",
                        a.decode, r.decode_ms, r.decode_tokens_per_s, r.decoded
                    ),
                ));
            }
            if md {
                println!("| | |\n|---|---|");
            }
            for (k, v) in &facts {
                if md {
                    println!("| {k} | {v} |");
                } else {
                    println!("{k:<8} {v}");
                }
            }
            if md {
                println!(
                    "\nTop logits of the last prompt token:\n\n| token id | logit |\n|---:|---:|"
                );
            } else {
                println!("top logits of the last prompt token:");
            }
            for (id, v) in &r.top_logits {
                if md {
                    println!("| {id} | {v:.5} |");
                } else {
                    println!("  {id:>8} {v:>12.5}");
                }
            }
            if let Some(rr) = &r.routing {
                print_routing(rr, md);
            }
        }
    }
    Ok(())
}

fn print_routing(r: &RoutingReport, md: bool) {
    if md {
        println!(
            "\nRouting of the prompt ({} experts, {} a token):\n\n| layer | experts touched | busiest expert's rows | mean rows (touched) | tiles of 32 rows |\n|---|---:|---:|---:|---:|",
            r.experts, r.experts_per_token
        );
    } else {
        println!(
            "routing of the prompt ({} experts, {} a token): experts touched, the busiest expert's rows, mean rows of a touched expert, tiles of 32 rows",
            r.experts, r.experts_per_token
        );
    }
    for l in r.layers.iter().chain(std::iter::once(&r.uniform)) {
        if md {
            println!(
                "| {} | {} | {} | {:.1} | {} |",
                l.node, l.experts_touched, l.max_rows, l.mean_rows_per_touched, l.tiles32
            );
        } else {
            println!(
                "  {:<24} {:>5} {:>6} {:>8.1} {:>6}",
                l.node, l.experts_touched, l.max_rows, l.mean_rows_per_touched, l.tiles32
            );
        }
    }
}
