//! Generation: prompt ids in, sampled tokens out, streamed as text, with stop rules and timings.
//!
//! - [`Generator`] owns a [`Session`] and runs one request at a time: it resumes from the live
//!   state or a saved one when the prompt extends their tokens (so turn 2 of a conversation only
//!   prefills what is new), prefills the rest, then decodes with [`Backend::sample`] (on the
//!   device for CUDA) until a stop rule fires.
//! - [`Engine`] is the thread-safe handle for servers: a worker thread owns the generator (GPU
//!   contexts stay on one thread), requests arrive through a bounded queue, tokens stream back
//!   through a callback, and each request has its own cancel flag.
//!
//! Text is produced through [`TokenText`] (the tokenizer's byte pieces), so the engine does not
//! depend on the tokenizer crate; stop strings are matched on the text, never split across
//! events, and never output.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use tally_model::rng::Rng;

use crate::EngineError;
use crate::backend::Backend;
use crate::prefix::PrefixCache;
use crate::sample::{SampleStep, SamplingParams};
use crate::session::Session;

/// What the generator needs from a tokenizer.
pub trait TokenText {
    /// The bytes token `id` stands for in output text (a control token may give none).
    fn token_bytes(&self, id: u32) -> Vec<u8>;
    /// Whether `id` ends generation (EOS, EOT, end-of-turn).
    fn is_end(&self, id: u32) -> bool;
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// A stop string appeared (it is not part of the text).
    Stop,
    /// An end-of-generation token was sampled (it is not part of the text).
    Eos,
    /// `max_tokens` were generated, or the context is full.
    Length,
    /// The cancel flag was set, or the token callback asked to stop.
    Cancelled,
}

impl Finish {
    /// The OpenAI `finish_reason` word.
    pub fn openai(self) -> &'static str {
        match self {
            Finish::Stop | Finish::Eos | Finish::Cancelled => "stop",
            Finish::Length => "length",
        }
    }
}

/// One streamed piece of output.
#[derive(Debug, Clone, Copy)]
pub struct TokenEvent<'a> {
    /// The sampled token, or `None` for the final flush of held-back text.
    pub token: Option<u32>,
    /// Text that became final with this token (valid UTF-8; may be empty while a multi-byte
    /// character or a possible stop string is incomplete).
    pub text: &'a str,
}

/// The result of one request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    /// Generated tokens (an end token that stopped generation included).
    pub tokens: Vec<u32>,
    /// Output text (everything streamed).
    pub text: String,
    pub finish: Finish,
    pub prompt_tokens: usize,
    /// Prompt tokens not prefilled because a live or saved state already held them.
    pub cached_tokens: usize,
    /// Seconds from the request to the first sampled token (restore, prefill, one sample).
    pub prefill_seconds: f64,
    /// Seconds from the first sampled token to the last.
    pub decode_seconds: f64,
    /// With [`Generator::check_sampler`]: steps where the backend's sampler chose another
    /// token than the CPU reference on the same logits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler_mismatches: Option<usize>,
}

impl Generation {
    /// Prompt tokens actually prefilled per second (0 if none).
    pub fn prefill_tok_s(&self) -> f64 {
        let n = self.prompt_tokens - self.cached_tokens;
        if self.prefill_seconds > 0.0 {
            n as f64 / self.prefill_seconds
        } else {
            0.0
        }
    }

    /// Decode rate: tokens after the first, per second.
    pub fn decode_tok_s(&self) -> f64 {
        let n = self.tokens.len().saturating_sub(1);
        if self.decode_seconds > 0.0 {
            n as f64 / self.decode_seconds
        } else {
            0.0
        }
    }
}

/// A session, the tokens its state holds, and (optionally) a cache of saved states.
pub struct Generator<B: Backend> {
    pub session: Session<B>,
    cache: Option<PrefixCache>,
    /// The tokens in the session's state now (`session.n_past()` of them).
    fed: Vec<u32>,
    check_sampler: bool,
}

impl<B: Backend> Generator<B> {
    /// A generator without saved states (it still resumes from its live state).
    pub fn new(session: Session<B>) -> Generator<B> {
        Generator {
            session,
            cache: None,
            fed: Vec::new(),
            check_sampler: false,
        }
    }

    /// Also downloads the logits each step and counts where the backend's sampler and the CPU
    /// reference disagree (a check for device samplers; slow).
    pub fn check_sampler(&mut self, on: bool) {
        self.check_sampler = on;
    }

    /// Saves the state at the end of each request into `cache` (see [`PrefixCache`]).
    pub fn with_cache(mut self, cache: PrefixCache) -> Generator<B> {
        self.cache = Some(cache);
        self
    }

    pub fn cache(&self) -> Option<&PrefixCache> {
        self.cache.as_ref()
    }

    /// The tokens the live state holds.
    pub fn state_tokens(&self) -> &[u32] {
        &self.fed
    }

    /// Forgets the live state and every saved one.
    pub fn reset(&mut self) {
        self.session.clear();
        self.fed.clear();
        if let Some(c) = &mut self.cache {
            for slot in c.clear() {
                self.session.backend.drop_state(slot);
            }
        }
    }

    /// Brings the state to the longest available prefix of `prompt` (live, saved, or none);
    /// returns how many prompt tokens it holds.
    fn resume(&mut self, prompt: &[u32]) -> Result<usize, EngineError> {
        let live = if self.fed.len() < prompt.len()
            && prompt.starts_with(&self.fed)
            && self.session.n_past() == self.fed.len()
        {
            self.fed.len()
        } else {
            0
        };
        let saved = self.cache.as_mut().and_then(|c| c.lookup(prompt));
        match saved {
            Some((slot, n)) if n > live => {
                self.session.restore(slot, n)?;
                self.fed = prompt[..n].to_vec();
                Ok(n)
            }
            _ if live > 0 => Ok(live),
            _ => {
                self.session.clear();
                self.fed.clear();
                Ok(0)
            }
        }
    }

    /// Runs one request: `on_token` sees every token and the text it completes, and may stop
    /// generation; `cancel` is checked between tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        text: &dyn TokenText,
        cancel: &AtomicBool,
        on_token: &mut dyn FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        params.validate().map_err(EngineError::Unsupported)?;
        if prompt.is_empty() {
            return Err(EngineError::Unsupported(
                "an empty prompt has no logits".into(),
            ));
        }
        let max_ctx = self.session.max_ctx();
        if prompt.len() > max_ctx {
            return Err(EngineError::TooLong {
                tokens: prompt.len(),
                max: max_ctx,
                why: "this session's context",
            });
        }
        let t0 = Instant::now();
        let cached = self.resume(prompt)?;
        // The state changes from here on: if anything fails, it no longer matches `fed`.
        let fed_before = std::mem::take(&mut self.fed);
        let mut plan = self.session.extend_run(&prompt[cached..])?;
        self.fed = fed_before;
        self.fed.extend_from_slice(&prompt[cached..]);

        let mut rng = Rng::new(params.seed);
        let mut history: Vec<u32> = prompt.to_vec();
        let mut out = Output::new(&params.stop);
        let mut tokens = Vec::new();
        let mut first: Option<Instant> = None;
        let mut prefill_seconds = 0.0;
        let mut mismatches: Option<usize> = None;
        let finish = loop {
            let step = SampleStep {
                params,
                window: params.window(&history),
                random: rng.next_u64(),
            };
            let id = self.session.backend.sample(&plan, &step)?;
            if self.check_sampler {
                self.session.backend.barrier()?;
                let logits = self.session.backend.read(&plan, plan.logits)?;
                let want = crate::sample::sample_logits(&logits, &step);
                *mismatches.get_or_insert(0) += usize::from(want != id);
            }
            if first.is_none() {
                prefill_seconds = t0.elapsed().as_secs_f64();
                first = Some(Instant::now());
            }
            tokens.push(id);
            history.push(id);
            if params.stop_at_eos && text.is_end(id) {
                break Finish::Eos;
            }
            let (piece, stopped) = out.push(&text.token_bytes(id));
            let flow = on_token(&TokenEvent {
                token: Some(id),
                text: &piece,
            });
            if stopped {
                break Finish::Stop;
            }
            if flow.is_break() || cancel.load(Ordering::Relaxed) {
                break Finish::Cancelled;
            }
            if tokens.len() >= params.max_tokens || self.session.n_past() >= max_ctx {
                break Finish::Length;
            }
            self.fed.push(id);
            plan = match self.session.decode_run(id) {
                Ok(p) => p,
                Err(e) => {
                    self.fed.clear();
                    self.session.clear();
                    return Err(e);
                }
            };
        };
        if finish != Finish::Stop {
            let rest = out.flush();
            if !rest.is_empty() {
                let _ = on_token(&TokenEvent {
                    token: None,
                    text: &rest,
                });
            }
        }
        let decode_seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.save_state()?;
        Ok(Generation {
            tokens,
            text: out.text,
            finish,
            prompt_tokens: prompt.len(),
            cached_tokens: cached,
            prefill_seconds,
            decode_seconds,
            sampler_mismatches: mismatches,
        })
    }

    /// Saves the live state into the cache (if there is one), freeing what it evicts.
    fn save_state(&mut self) -> Result<(), EngineError> {
        let Some(cache) = self.cache.as_mut() else {
            return Ok(());
        };
        if self.fed.is_empty() {
            return Ok(());
        }
        let slot = cache.new_slot();
        let bytes = self.session.save(slot)?;
        for s in cache.insert(self.fed.clone(), slot, bytes) {
            self.session.backend.drop_state(s);
        }
        Ok(())
    }
}

/// Output text under construction: bytes to UTF-8 (an incomplete character held back, an
/// invalid byte as U+FFFD), and text held back while it could be the start of a stop string.
struct Output<'a> {
    stop: &'a [String],
    bytes: Vec<u8>,
    held: String,
    /// Everything emitted.
    text: String,
}

impl<'a> Output<'a> {
    fn new(stop: &'a [String]) -> Output<'a> {
        Output {
            stop,
            bytes: Vec::new(),
            held: String::new(),
            text: String::new(),
        }
    }

    /// Adds a token's bytes; returns the text that became final and whether a stop string
    /// appeared (the text before it is then final; it and what follows are dropped).
    fn push(&mut self, piece: &[u8]) -> (String, bool) {
        self.bytes.extend_from_slice(piece);
        let mut rest: &[u8] = &self.bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.held.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (ok, tail) = rest.split_at(e.valid_up_to());
                    // SAFETY-free: `ok` is valid UTF-8 by `valid_up_to`.
                    self.held
                        .push_str(std::str::from_utf8(ok).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            self.held.push('\u{FFFD}');
                            rest = &tail[n..];
                        }
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        self.bytes = rest.to_vec();
        if let Some(at) = self
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_string();
            self.text.push_str(&out);
            self.held.clear();
            return (out, true);
        }
        let keep = self.possible_stop_start();
        let out = self.held[..keep].to_string();
        self.held.drain(..keep);
        self.text.push_str(&out);
        (out, false)
    }

    /// Where the longest suffix of `held` that is a proper prefix of a stop string begins.
    fn possible_stop_start(&self) -> usize {
        let h = &self.held;
        for (i, _) in h.char_indices() {
            let suffix = &h[i..];
            if self
                .stop
                .iter()
                .any(|s| s.len() > suffix.len() && s.starts_with(suffix))
            {
                return i;
            }
        }
        h.len()
    }

    /// The held-back text and any incomplete character (lossily), at the end.
    fn flush(&mut self) -> String {
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&String::from_utf8_lossy(&self.bytes));
        self.bytes.clear();
        self.text.push_str(&out);
        out
    }
}

// ---------------------------------------------------------------------------------------------

/// A token callback that can run on the engine's worker thread.
pub type OnToken = Box<dyn FnMut(&TokenEvent<'_>) -> ControlFlow<()> + Send>;

/// A request for [`Engine::submit`].
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Called on the worker thread for each token; `Break` stops this request.
    pub on_token: OnToken,
}

/// Why a request was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({0} requests waiting)")]
    QueueFull(usize),
    #[error("the engine has stopped")]
    Stopped,
}

/// A queued or running request: cancel it, or wait for its result.
pub struct Ticket {
    cancel: Arc<AtomicBool>,
    done: mpsc::Receiver<Result<Generation, EngineError>>,
}

impl Ticket {
    /// Asks the worker to stop this request at the next token (or skip it if still queued).
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// The flag [`Ticket::cancel`] sets (for a server's disconnect watcher).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Blocks until the request has finished.
    pub fn wait(self) -> Result<Generation, EngineError> {
        self.done
            .recv()
            .unwrap_or_else(|_| Err(EngineError::Internal("the engine worker stopped".into())))
    }

    /// The result if the request has finished.
    pub fn try_wait(&self) -> Option<Result<Generation, EngineError>> {
        self.done.try_recv().ok()
    }
}

struct Job {
    req: Request,
    cancel: Arc<AtomicBool>,
    done: mpsc::Sender<Result<Generation, EngineError>>,
}

/// A thread-safe handle to one generator running on its own worker thread.
///
/// Requests run one at a time in arrival order (batching is a later change behind the same
/// interface). The queue is bounded: [`Engine::submit`] fails with [`SubmitError::QueueFull`]
/// past `queue` waiting requests, which a server turns into 429/503. Token callbacks run on the
/// worker thread, so they must be quick (push into a channel). Dropping the engine closes the
/// queue, lets the worker finish what was already queued (cancel tickets to cut that short),
/// and joins it.
///
/// ```ignore
/// let engine = Engine::spawn(move || Ok(Generator::new(Session::new(model, backend, 4096)?)),
///                            tokenizer, 16)?;
/// let ticket = engine.submit(Request { prompt, params, on_token: Box::new(|ev| {
///     tx.send(ev.text.to_string()).ok(); ControlFlow::Continue(()) }) })?;
/// let generation = ticket.wait()?;
/// ```
pub struct Engine {
    tx: Option<mpsc::SyncSender<Job>>,
    waiting: Arc<AtomicUsize>,
    capacity: usize,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    /// Starts the worker: `make` builds the generator on it (backend and weights load there);
    /// its error is returned here. `text` turns tokens into text for every request.
    pub fn spawn<B, F>(
        make: F,
        text: Arc<dyn TokenText + Send + Sync>,
        queue: usize,
    ) -> Result<Engine, EngineError>
    where
        B: Backend + 'static,
        F: FnOnce() -> Result<Generator<B>, EngineError> + Send + 'static,
    {
        let capacity = queue.max(1);
        let (tx, rx) = mpsc::sync_channel::<Job>(capacity);
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), EngineError>>();
        let waiting = Arc::new(AtomicUsize::new(0));
        let w = waiting.clone();
        let worker = std::thread::Builder::new()
            .name("tally-engine".into())
            .spawn(move || {
                let mut generator = match make() {
                    Ok(g) => {
                        let _ = ready_tx.send(Ok(()));
                        g
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(mut job) = rx.recv() {
                    w.fetch_sub(1, Ordering::Relaxed);
                    let result = if job.cancel.load(Ordering::Relaxed) {
                        Err(EngineError::Unsupported(
                            "cancelled before it started".into(),
                        ))
                    } else {
                        generator.generate(
                            &job.req.prompt,
                            &job.req.params,
                            text.as_ref(),
                            &job.cancel,
                            &mut job.req.on_token,
                        )
                    };
                    let _ = job.done.send(result);
                }
            })
            .map_err(|e| EngineError::Internal(format!("starting the engine thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Engine {
                tx: Some(tx),
                waiting,
                capacity,
                worker: Some(worker),
            }),
            Ok(Err(e)) => {
                let _ = worker.join();
                Err(e)
            }
            Err(_) => {
                let _ = worker.join();
                Err(EngineError::Internal("the engine thread panicked".into()))
            }
        }
    }

    /// Queues a request; fails at once when `queue` requests are already waiting.
    pub fn submit(&self, req: Request) -> Result<Ticket, SubmitError> {
        let tx = self.tx.as_ref().ok_or(SubmitError::Stopped)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            req,
            cancel: cancel.clone(),
            done: done_tx,
        };
        match tx.try_send(job) {
            Ok(()) => Ok(Ticket {
                cancel,
                done: done_rx,
            }),
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                Err(match e {
                    mpsc::TrySendError::Full(_) => SubmitError::QueueFull(self.capacity),
                    mpsc::TrySendError::Disconnected(_) => SubmitError::Stopped,
                })
            }
        }
    }

    /// Requests waiting (not counting the running one).
    pub fn queue_depth(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
