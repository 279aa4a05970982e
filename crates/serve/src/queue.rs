//! One engine, one worker thread, a bounded queue in front of it. A full queue is a 429; a
//! generation stops when its cancel flag is set (the client went away) or the server shuts down.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::{EngineFinish, Flow, GenRequest, Generator, Piece};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::stop::StopMatcher;

/// Why a choice ended, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the context.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What the worker sends back to the request's handler, in order: text, then one `Done` or `Error`.
#[derive(Debug)]
pub enum Event {
    Text(String),
    Done {
        completion_tokens: u32,
        finish: FinishReason,
    },
    Error(ApiError),
}

/// An admitted request.
pub struct Job {
    pub req: GenRequest,
    pub stop: Vec<String>,
    pub cancel: Arc<AtomicBool>,
    pub events: UnboundedSender<Event>,
}

/// Seconds a rejected client is told to wait.
const RETRY_AFTER_S: u32 = 1;

/// The admission side of the queue; cheap to share.
pub struct Queue {
    tx: SyncSender<(Job, Instant)>,
    shutdown: Arc<AtomicBool>,
    /// The cancel flag of the generation now running, so shutdown can stop it.
    current: Arc<Mutex<Option<Arc<AtomicBool>>>>,
    metrics: Arc<Metrics>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    /// Starts the worker thread. `capacity` requests may wait while one runs.
    pub fn start(engine: Arc<dyn Generator>, capacity: usize, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Job, Instant)>(capacity);
        let shutdown = Arc::new(AtomicBool::new(false));
        let current = Arc::new(Mutex::new(None));
        let w = Worker {
            engine,
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
            current: current.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("tally-serve-engine".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok((job, admitted)) => w.run(job, admitted),
                        Err(RecvTimeoutError::Timeout) => {
                            if w.shutdown.load(Ordering::Acquire) {
                                return;
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok();
        Queue {
            tx,
            shutdown,
            current,
            metrics,
            worker: Mutex::new(handle),
        }
    }

    /// Admits `job` or says why not: 429 when the queue is full, 503 when shutting down.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        if self.shutdown.load(Ordering::Acquire) {
            return Err(shutting_down());
        }
        // Counted before the send so the worker's decrement can never run first.
        self.metrics.queue_depth.inc();
        match self.tx.try_send((job, Instant::now())) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.metrics.queue_depth.dec();
                let mut e = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    "the server's queue is full; retry after a second",
                )
                .code("queue_full");
                e.retry_after_s = Some(RETRY_AFTER_S);
                Err(e)
            }
            Err(TrySendError::Disconnected(_)) => {
                self.metrics.queue_depth.dec();
                Err(ApiError::internal("the engine's worker has stopped"))
            }
        }
    }

    /// Refuses new requests, stops the running generation, fails the queued ones, and waits for
    /// the worker to end.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        if let Ok(c) = self.current.lock() {
            if let Some(flag) = c.as_ref() {
                flag.store(true, Ordering::Release);
            }
        }
        let handle = self.worker.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

fn shutting_down() -> ApiError {
    let mut e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "the server is shutting down",
    )
    .code("shutting_down");
    e.retry_after_s = Some(RETRY_AFTER_S);
    e
}

struct Worker {
    engine: Arc<dyn Generator>,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
    current: Arc<Mutex<Option<Arc<AtomicBool>>>>,
}

impl Worker {
    fn run(&self, job: Job, admitted: Instant) {
        self.metrics.queue_depth.dec();
        if self.shutdown.load(Ordering::Acquire) {
            let _ = job.events.send(Event::Error(shutting_down()));
            self.metrics.finished.with_label_values(&["error"]).inc();
            return;
        }
        if job.cancel.load(Ordering::Acquire) || job.events.is_closed() {
            self.metrics
                .finished
                .with_label_values(&["cancelled"])
                .inc();
            return;
        }
        if let Ok(mut c) = self.current.lock() {
            *c = Some(job.cancel.clone());
        }
        self.metrics.running.inc();
        let mut matcher = StopMatcher::new(job.stop.clone());
        let mut first: Option<Instant> = None;
        let mut by_stop_string = false;
        let result = {
            let mut on_piece = |p: Piece<'_>| {
                if first.is_none() {
                    let now = Instant::now();
                    self.metrics
                        .ttft_seconds
                        .observe((now - admitted).as_secs_f64());
                    first = Some(now);
                }
                let fed = matcher.feed(p.text);
                if !fed.emit.is_empty() && job.events.send(Event::Text(fed.emit)).is_err() {
                    // The handler is gone: the client disconnected.
                    job.cancel.store(true, Ordering::Release);
                    return Flow::Stop;
                }
                if fed.stopped {
                    by_stop_string = true;
                    return Flow::Stop;
                }
                Flow::Continue
            };
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.engine.generate(&job.req, &job.cancel, &mut on_piece)
            }))
        };
        self.metrics.running.dec();
        if let Ok(mut c) = self.current.lock() {
            *c = None;
        }
        let stats = match result {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.metrics.finished.with_label_values(&["error"]).inc();
                let _ = job.events.send(Event::Error(e.into()));
                return;
            }
            Err(_) => {
                self.metrics.finished.with_label_values(&["error"]).inc();
                let _ = job.events.send(Event::Error(ApiError::internal(
                    "the engine failed (panic)",
                )));
                return;
            }
        };
        self.metrics
            .generated_tokens
            .inc_by(u64::from(stats.completion_tokens));
        if let Some(t0) = first {
            let secs = t0.elapsed().as_secs_f64();
            if stats.completion_tokens >= 2 && secs > 0.0 {
                self.metrics
                    .decode_tokens_per_second
                    .observe(f64::from(stats.completion_tokens - 1) / secs);
            }
        }
        let finish = match stats.finish {
            _ if self.shutdown.load(Ordering::Acquire)
                && stats.finish == EngineFinish::Cancelled =>
            {
                self.metrics.finished.with_label_values(&["error"]).inc();
                let _ = job.events.send(Event::Error(shutting_down()));
                return;
            }
            EngineFinish::Cancelled => {
                self.metrics
                    .finished
                    .with_label_values(&["cancelled"])
                    .inc();
                return;
            }
            EngineFinish::Stopped if !by_stop_string => {
                // Only the callback stops the engine; without a stop string it was the client.
                self.metrics
                    .finished
                    .with_label_values(&["cancelled"])
                    .inc();
                return;
            }
            EngineFinish::Eos | EngineFinish::Stopped => FinishReason::Stop,
            EngineFinish::Length => FinishReason::Length,
        };
        if !by_stop_string {
            let rest = matcher.finish();
            if !rest.is_empty() {
                let _ = job.events.send(Event::Text(rest));
            }
        }
        self.metrics
            .finished
            .with_label_values(&[finish.as_str()])
            .inc();
        let _ = job.events.send(Event::Done {
            completion_tokens: stats.completion_tokens,
            finish,
        });
    }
}
