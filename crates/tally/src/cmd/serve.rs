//! `tally serve`: the OpenAI-compatible server (crate tally-serve) over the real engine. This file
//! is the adapter: tally-serve's narrow `Generator` trait implemented with tally-text (tokenizer,
//! chat template) and the engine's generation worker.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use anyhow::{Context, Result};
use tally_engine::generate::{Engine, Finish, Generator as EngineGenerator, Request};
use tally_engine::prefix::PrefixCache;
use tally_engine::sample::SamplingParams;
use tally_engine::{EngineError as CoreError, Session};
use tally_serve::{
    ChatPrompt, EngineError, EngineFinish, Flow, GenRequest, GenStats, Generator, Piece,
};
use tally_text::{ChatMessage, ChatRequest, ChatTemplate, Tokenizer};

use super::InputError;
use super::generate::{ModelArgs, Text, template};

/// Serve the model over HTTP with OpenAI's API: /v1/chat/completions and /v1/completions
/// (streaming or not), /v1/models, /health, /metrics (Prometheus).
///
/// One request generates at a time; up to --queue more wait, and past that a request gets 429.
///
/// Example:
///   tally serve --model model.gguf --port 8080 --alias qwen3.6
///   curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
///     -d '{"model":"qwen3.6","messages":[{"role":"user","content":"Hello"}]}'
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    m: ModelArgs,
    /// Address to listen on (loopback by default; 0.0.0.0 exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The model id clients send as `model` (default: the file name without `.gguf`).
    #[arg(long)]
    alias: Option<String>,
    /// Requests that may wait while one generates; past it, 429 with Retry-After.
    #[arg(long, default_value_t = 16)]
    queue: usize,
    /// A Jinja chat template to use instead of the file's `tokenizer.chat_template`.
    #[arg(long)]
    template: Option<PathBuf>,
    /// Largest request body accepted, in MiB (past it, 413).
    #[arg(long, default_value_t = 8)]
    body_limit_mib: usize,
    /// Saved conversation states for multi-turn resume (0: off).
    #[arg(long, default_value_t = 8)]
    cache_entries: usize,
    /// Memory the saved states may take, in MiB.
    #[arg(long, default_value_t = 2048)]
    cache_mib: usize,
}

/// The engine behind tally-serve's trait.
struct Real {
    engine: Engine,
    tok: Arc<Text>,
    template: ChatTemplate,
    ctx: usize,
}

fn tokenizer(m: &ModelArgs) -> Result<Tokenizer> {
    let path = m.tokenizer.as_ref().unwrap_or(&m.model);
    let f =
        tally_gguf::GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    // A file without a usable vocabulary is bad input (exit 2), like any other unusable file.
    Tokenizer::from_gguf(&f).map_err(|e| {
        InputError(format!(
            "reading the vocabulary of {}: {e} (give --tokenizer FILE for a file without one)",
            path.display()
        ))
        .into()
    })
}

fn core_error(e: CoreError) -> EngineError {
    match e {
        CoreError::TooLong { .. } | CoreError::TokenId { .. } | CoreError::Unsupported(_) => {
            EngineError::BadRequest(e.to_string())
        }
        other => EngineError::Internal(other.to_string()),
    }
}

/// A seed for a request that gave none.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed)
}

impl Generator for Real {
    fn context_length(&self) -> usize {
        self.ctx
    }

    fn vocab_size(&self) -> usize {
        self.tok.0.vocab_size()
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        Ok(self.tok.0.encode(text, true))
    }

    fn render_chat(&self, chat: &ChatPrompt) -> Result<String, EngineError> {
        let messages = chat
            .messages
            .iter()
            .map(|m| serde_json::from_value::<ChatMessage>(m.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| EngineError::BadRequest(format!("messages: {e}")))?;
        let mut extra = chat.template_kwargs.clone();
        if let Some(tc) = &chat.tool_choice {
            extra.insert("tool_choice".into(), tc.clone());
        }
        let req = ChatRequest {
            messages,
            tools: chat.tools.clone().map(serde_json::Value::Array),
            add_generation_prompt: chat.add_generation_prompt,
            enable_thinking: chat.enable_thinking,
            extra,
        };
        // The template raises on chats it cannot render (e.g. no user turn): the client's fault.
        self.template
            .render(&req)
            .map_err(|e| EngineError::BadRequest(format!("the chat template: {e}")))
    }

    fn generate(
        &self,
        req: &GenRequest,
        cancel: &AtomicBool,
        on_piece: &mut dyn FnMut(Piece<'_>) -> Flow,
    ) -> Result<GenStats, EngineError> {
        let s = &req.sampling;
        let params = SamplingParams {
            temperature: s.temperature,
            top_k: s.top_k as usize,
            top_p: s.top_p,
            min_p: s.min_p,
            repetition_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            seed: s.seed.unwrap_or_else(fresh_seed),
            max_tokens: req.max_tokens as usize,
            // tally-serve matches stop strings itself (over the text it streams).
            stop: Vec::new(),
            stop_at_eos: !s.ignore_eos,
            ..SamplingParams::default()
        };
        // The engine's callback runs on its worker; the pieces come back here, where the server's
        // callback decides, and a stop or a cancel reaches the engine through the ticket.
        let (tx, rx) = mpsc::channel::<(Option<u32>, String)>();
        let ticket = self
            .engine
            .submit(Request {
                prompt: req.prompt.clone(),
                params,
                on_token: Box::new(move |ev| match tx.send((ev.token, ev.text.to_string())) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(_) => ControlFlow::Break(()),
                }),
            })
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let mut stopped = false;
        loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok((token, text)) => {
                    if !stopped && on_piece(Piece { token, text: &text }) == Flow::Stop {
                        stopped = true;
                        ticket.cancel();
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // The engine dropped the callback: the request is over.
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if cancel.load(Ordering::Acquire) {
                ticket.cancel();
            }
        }
        let g = ticket.wait().map_err(core_error)?;
        let finish = match g.finish {
            Finish::Eos => EngineFinish::Eos,
            Finish::Length => EngineFinish::Length,
            Finish::Stop => EngineFinish::Stopped,
            Finish::Cancelled if stopped => EngineFinish::Stopped,
            Finish::Cancelled => EngineFinish::Cancelled,
        };
        Ok(GenStats {
            completion_tokens: g.tokens.len() as u32,
            finish,
        })
    }
}

/// The model id: `--alias`, else the file name without its extension.
fn model_id(a: &Args) -> String {
    a.alias.clone().unwrap_or_else(|| {
        a.m.model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    })
}

pub fn main(a: Args) -> Result<()> {
    if a.queue == 0 {
        return Err(InputError("--queue must be at least 1".into()).into());
    }
    let addr: SocketAddr = format!("{}:{}", a.host, a.port)
        .parse()
        .or_else(|_| format!("[{}]:{}", a.host, a.port).parse())
        .map_err(|_| InputError(format!("--host `{}` is not an IP address", a.host)))?;
    let model = super::common::open_model(&a.m.model)?;
    let tok = tokenizer(&a.m)?;
    if tok.vocab_size() > model.config.vocab {
        return Err(InputError(format!(
            "the vocabulary has {} tokens but the model only {} logits",
            tok.vocab_size(),
            model.config.vocab
        ))
        .into());
    }
    let template = template(&a.m, a.template.as_deref())?;
    let ctx = a.m.ctx.min(model.config.context_length);
    let text = Arc::new(Text(tok));
    let (backend_name, threads) = (a.m.backend.clone(), a.m.threads);
    let (cache_entries, cache_bytes) = (a.cache_entries, a.cache_mib << 20);
    let (dev_tx, dev_rx) = mpsc::channel::<String>();
    let m2 = model.clone();
    super::common::compile_note(&backend_name);
    // The backend is opened on the engine's worker thread: device contexts stay on it.
    let engine = Engine::spawn(
        move || {
            let backend = tally_engine::backend::open(&backend_name, m2.clone(), threads)?;
            let _ = dev_tx.send(backend.device());
            let g = EngineGenerator::new(Session::new(m2, backend, ctx)?);
            Ok(if cache_entries > 0 {
                g.with_cache(PrefixCache::new(cache_bytes, cache_entries))
            } else {
                g
            })
        },
        text.clone(),
        1,
    )?;
    let device = dev_rx.recv().unwrap_or_default();
    let id = model_id(&a);
    let mut cfg = tally_serve::Config::new(id.clone());
    cfg.queue = a.queue;
    cfg.body_limit_bytes = a.body_limit_mib << 20;
    let real = Real {
        engine,
        tok: text,
        template,
        ctx,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let local = listener.local_addr().context("the listening address")?;
        println!(
            "tally serve: model `{id}` on {device}, context {ctx}, queue {}",
            a.queue
        );
        println!("listening on http://{local}");
        println!(
            "try: curl http://{local}/v1/chat/completions -H 'Content-Type: application/json' \
             -d '{{\"model\":\"{id}\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'"
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let app = tally_serve::App::new(Arc::new(real), cfg);
        tally_serve::serve(listener, app, tally_serve::shutdown_signal())
            .await
            .context("serving")?;
        println!("tally serve: stopped");
        Ok(())
    })
}
