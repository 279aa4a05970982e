//! `tally generate`: a prompt in, streamed text out, and the speeds at the end.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use serde::Serialize;
use tally_engine::Session;
use tally_engine::generate::{Generation, Generator, TokenText};
use tally_engine::sample::SamplingParams;
use tally_text::{ChatMessage, ChatRequest, ChatTemplate, Tokenizer};

use super::{Format, InputError};

/// How tokens are chosen (llama.cpp's defaults; `--temp 0` is greedy).
#[derive(clap::Args, Debug, Clone)]
pub struct Sampling {
    /// Temperature; 0 = greedy (the most likely token, ties to the lowest id).
    #[arg(long = "temp", default_value_t = 0.8)]
    temperature: f32,
    /// Keep the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling: keep the most likely tokens holding this probability (1 = off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Keep tokens at least this fraction as likely as the best (0 = off).
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Repetition penalty over the last --repeat-last-n tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Tokens the penalties look back over.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Presence penalty (subtracted once per token present in the window).
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// Frequency penalty (subtracted per occurrence in the window).
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Seed of the sampler (same seed, same prompt, same output).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when the output contains this text (repeatable; not printed).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 256)]
    max_tokens: usize,
}

impl Sampling {
    pub fn params(&self) -> Result<SamplingParams> {
        let p = SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            seed: self.seed,
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            stop_at_eos: !self.ignore_eos,
        };
        p.validate().map_err(InputError)?;
        if p.max_tokens == 0 {
            return Err(InputError("-n/--max-tokens must be at least 1".into()).into());
        }
        Ok(p)
    }
}

/// The model, its vocabulary and where it runs.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The qwen35moe GGUF file (of a split model, the first part: NAME-00001-of-0000N.gguf).
    #[arg(long)]
    pub model: PathBuf,
    /// A GGUF holding the vocabulary (tokenizer.ggml.*) when the model file has none, e.g. a
    /// vocab-only file; default: the model file.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Backend: cpu (reference) or cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// CPU threads (0: one per core).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Context: positions the session holds (prompt and output).
    #[arg(short = 'c', long, default_value_t = 4096)]
    pub ctx: usize,
}

/// The tokenizer as the generator sees it: control tokens print as nothing.
pub struct Text(pub Tokenizer);

impl TokenText for Text {
    fn token_bytes(&self, id: u32) -> Vec<u8> {
        if self.0.is_control(id) {
            Vec::new()
        } else {
            self.0.token_piece(id).to_vec()
        }
    }
    fn is_end(&self, id: u32) -> bool {
        self.0.is_eog(id)
    }
}

/// A loaded model with its tokenizer and a generator over the chosen backend.
pub struct Loaded {
    pub text: Arc<Text>,
    pub generator: Generator<Box<dyn tally_engine::Backend>>,
    pub device: String,
}

pub fn load(a: &ModelArgs) -> Result<Loaded> {
    let model = super::common::open_model(&a.model)?;
    let tok_file = match &a.tokenizer {
        Some(p) => {
            tally_gguf::GgufFile::open(p).with_context(|| format!("opening {}", p.display()))?
        }
        None => tally_gguf::GgufFile::open(&a.model)
            .with_context(|| format!("opening {}", a.model.display()))?,
    };
    let tok = Tokenizer::from_gguf(&tok_file).with_context(|| {
        format!(
            "reading the vocabulary of {} (give --tokenizer FILE for a file without one)",
            tok_file.path().display()
        )
    })?;
    if tok.vocab_size() > model.config.vocab {
        return Err(InputError(format!(
            "the vocabulary has {} tokens but the model only {} logits",
            tok.vocab_size(),
            model.config.vocab
        ))
        .into());
    }
    let ctx = a.ctx.min(model.config.context_length);
    let backend = super::common::open_backend(&a.backend, model.clone(), a.threads)?;
    let device = backend.device();
    let session = Session::new(model.clone(), backend, ctx)?;
    Ok(Loaded {
        text: Arc::new(Text(tok)),
        generator: Generator::new(session),
        device,
    })
}

/// The chat template: `--template FILE`, else the model's (or the tokenizer file's).
pub fn template(a: &ModelArgs, file: Option<&Path>) -> Result<ChatTemplate> {
    let t = match file {
        Some(p) => ChatTemplate::from_file(p)?,
        None => {
            let path = a.tokenizer.as_ref().unwrap_or(&a.model);
            let f = tally_gguf::GgufFile::open(path)?;
            ChatTemplate::from_gguf(&f).map_err(|e| {
                InputError(format!(
                    "{e} ({} has no usable tokenizer.chat_template: give --template FILE)",
                    path.display()
                ))
            })?
        }
    };
    Ok(t)
}

/// Generate text from a prompt, streamed to stdout; speeds go to stderr at the end.
///
/// Example: tally generate --model model.gguf --prompt "The capital of France is" -n 32 --temp 0
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    m: ModelArgs,
    /// The prompt text.
    #[arg(long, short = 'p')]
    prompt: String,
    /// Wrap the prompt as a user message in the chat template (with the assistant's header).
    #[arg(long)]
    chat: bool,
    /// A system message (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// A Jinja chat template to use instead of the file's (with --chat).
    #[arg(long, requires = "chat")]
    template: Option<PathBuf>,
    /// With --chat: turn the model's reasoning block off (Qwen's enable_thinking=false).
    #[arg(long, requires = "chat")]
    no_think: bool,
    #[command(flatten)]
    s: Sampling,
    /// Also run the CPU reference sampler on each step's logits and report disagreements
    /// (`sampler_mismatches`; a check of on-device sampling, slower).
    #[arg(long)]
    verify_sampler: bool,
    /// Speculative decoding: `mtp` (the file's multi-token-prediction block drafts, greedily;
    /// the tokens are distributed as without it). The output is printed at the end, not
    /// streamed, and generation runs to -n tokens before EOS and --stop cut it.
    #[arg(long, value_parser = ["mtp"])]
    spec: Option<String>,
    /// Drafts verified per step with --spec (k, 1 to 16).
    #[arg(long, default_value_t = 3)]
    draft_max: usize,
    /// text: the output streamed, speeds on stderr; json: one object at the end.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

#[derive(Serialize)]
struct Report<'a> {
    model: String,
    backend: String,
    device: String,
    #[serde(flatten)]
    generation: &'a Generation,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
}

/// The speeds line printed after an answer.
pub fn speeds(g: &Generation) -> String {
    format!(
        "prompt {} tokens ({} resumed) in {:.3} s: {:.1} tok/s | generated {} tokens in {:.3} s: {:.1} tok/s | finish: {}",
        g.prompt_tokens,
        g.cached_tokens,
        g.prefill_seconds,
        g.prefill_tok_s(),
        g.tokens.len(),
        g.decode_seconds,
        g.decode_tok_s(),
        serde_json::to_value(g.finish)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    )
}

pub fn main(a: Args) -> Result<()> {
    let params = a.s.params()?;
    let mut l = load(&a.m)?;
    l.generator.check_sampler(a.verify_sampler);
    let text = if a.chat {
        let t = template(&a.m, a.template.as_deref())?;
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", &a.prompt));
        t.render(&ChatRequest {
            messages,
            add_generation_prompt: true,
            enable_thinking: a.no_think.then_some(false),
            ..ChatRequest::default()
        })?
    } else {
        a.prompt.clone()
    };
    let mut ids = Vec::new();
    if !a.chat && l.text.0.add_bos() {
        ids.extend(l.text.0.bos());
    }
    ids.extend(l.text.0.encode(&text, a.chat));
    if ids.is_empty() {
        return Err(InputError("the prompt is empty".into()).into());
    }
    if a.spec.is_some() {
        return speculative(&a, &mut l, &ids, &params);
    }
    let stream = a.output == Format::Text;
    let mut stdout = std::io::stdout().lock();
    let cancel = AtomicBool::new(false);
    let g = l
        .generator
        .generate(&ids, &params, l.text.as_ref(), &cancel, &mut |ev| {
            if stream && !ev.text.is_empty() {
                let _ = stdout.write_all(ev.text.as_bytes());
                let _ = stdout.flush();
            }
            std::ops::ControlFlow::Continue(())
        })?;
    match a.output {
        Format::Json => {
            let r = Report {
                model: a.m.model.display().to_string(),
                backend: a.m.backend.clone(),
                device: l.device.clone(),
                generation: &g,
                prefill_tokens_per_s: g.prefill_tok_s(),
                decode_tokens_per_s: g.decode_tok_s(),
            };
            writeln!(stdout, "{}", serde_json::to_string_pretty(&r)?)?;
        }
        Format::Text | Format::Md => {
            writeln!(stdout)?;
            eprintln!("{}", speeds(&g));
        }
    }
    Ok(())
}

/// `--spec mtp`: speculative decoding with the file's MTP block ([`tally_engine::spec`]), then
/// the end-of-generation and stop-string rules on the whole output.
fn speculative(a: &Args, l: &mut Loaded, ids: &[u32], params: &SamplingParams) -> Result<()> {
    use tally_engine::generate::TokenText;
    use tally_engine::spec::{MtpDraft, generate};
    if a.draft_max == 0 || a.draft_max > 16 {
        return Err(InputError(format!(
            "--draft-max {}: 1 to 16 drafts per step",
            a.draft_max
        ))
        .into());
    }
    let session = &mut l.generator.session;
    if session.model.mtp.is_empty() {
        return Err(InputError(format!(
            "--spec mtp: {} has no MTP block (qwen35moe.nextn_predict_layers is 0)",
            a.m.model.display()
        ))
        .into());
    }
    if ids.len() >= session.max_ctx() {
        return Err(InputError(format!(
            "the prompt's {} tokens leave no room in a context of {} (-c)",
            ids.len(),
            session.max_ctx()
        ))
        .into());
    }
    let n = params.max_tokens.min(session.max_ctx() - ids.len());
    let mut draft = MtpDraft::new(&session.model)?;
    let t0 = std::time::Instant::now();
    let (mut tokens, st) = generate(session, ids, n, a.draft_max, &mut draft, params)?;
    let prefill_s = t0.elapsed().as_secs_f64() - st.decode_s;
    let mut finish = "length";
    if params.stop_at_eos
        && let Some(i) = tokens.iter().position(|&t| l.text.is_end(t))
    {
        tokens.truncate(i + 1);
        finish = "stop";
    }
    let bytes: Vec<u8> = tokens.iter().flat_map(|&t| l.text.token_bytes(t)).collect();
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if let Some(cut) = params
        .stop
        .iter()
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        text.truncate(cut);
        finish = "stop";
    }
    let mut stdout = std::io::stdout().lock();
    match a.output {
        Format::Json => {
            let r = serde_json::json!({
                "model": a.m.model.display().to_string(),
                "backend": a.m.backend,
                "device": l.device,
                "tokens": tokens,
                "text": text,
                "finish": finish,
                "prompt_tokens": ids.len(),
                "prefill_seconds": prefill_s,
                "spec": {"draft": "mtp", "draft_max": a.draft_max, "stats": st},
                "decode_tokens_per_s": st.decode_tok_s(),
            });
            writeln!(stdout, "{}", serde_json::to_string_pretty(&r)?)?;
        }
        Format::Text | Format::Md => {
            writeln!(stdout, "{text}")?;
            eprintln!(
                "prompt {} tokens in {prefill_s:.3} s | generated {} tokens in {:.3} s: {:.1} tok/s \
                 | spec mtp k={}: {} of {} drafts kept ({:.2}) over {} steps | finish: {finish}",
                ids.len(),
                st.tokens,
                st.decode_s,
                st.decode_tok_s(),
                a.draft_max,
                st.accepted,
                st.drafted,
                st.acceptance(),
                st.steps
            );
        }
    }
    Ok(())
}
