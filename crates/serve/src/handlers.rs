//! `POST /v1/chat/completions` and `POST /v1/completions`: parse, validate, tokenize, check the
//! context, admit to the queue, then answer as one JSON body or as server-sent events.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::{self, ChatRequest, Common, CompletionRequest, PromptInput, SamplingFields};
use crate::engine::GenRequest;
use crate::error::ApiError;
use crate::queue::{Event, FinishReason, Job};
use crate::server::{App, unix_now_s};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

/// Sets the generation's cancel flag when the response (or the handler) is dropped: this is how
/// a client that disconnects stops its generation.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The body as JSON: unreadable or not JSON is a 400 without a `param`.
fn parse_json(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "the request body is larger than the server accepts (--body-limit)",
            )
            .code("request_too_large")
        } else {
            ApiError::invalid(format!("could not read the request body: {r}"))
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request: {e}"
        ))
        .code("invalid_json")
    })
}

/// `T` from the body; a missing field or a wrong type is a 400 naming the field.
fn typed<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid `{path}`: {inner}")).param(path)
        }
    })
}

/// What a handler needs after validation: the job's parts and how to answer.
struct Prepared {
    kind: Kind,
    common: Common,
    prompt: Vec<u32>,
    max_tokens: u32,
}

fn check_model(app: &App, model: &str) -> Result<(), ApiError> {
    if model != app.config.model_id {
        return Err(app.model_not_found(model));
    }
    Ok(())
}

/// The context checks: a prompt that leaves no room is a 400, `max_tokens` past the whole context
/// is a 400, and a `max_tokens` that fits the context but not what the prompt leaves is clamped.
fn budget(
    app: &App,
    prompt_len: usize,
    requested: Option<u64>,
    default: Option<u64>,
    param: &str,
    prompt_param: &str,
) -> Result<u32, ApiError> {
    let ctx = app.engine.context_length();
    if prompt_len == 0 {
        return Err(ApiError::invalid("the prompt is empty").param(prompt_param));
    }
    if prompt_len >= ctx {
        return Err(ApiError::invalid(format!(
            "This model's maximum context length is {ctx} tokens. However, your prompt is \
             {prompt_len} tokens, which leaves no room to generate."
        ))
        .param(prompt_param)
        .code("context_length_exceeded"));
    }
    if let Some(n) = requested {
        if n > ctx as u64 {
            return Err(ApiError::invalid(format!(
                "{param}={n} is more than this model's whole context ({ctx} tokens)"
            ))
            .param(param)
            .code("context_length_exceeded"));
        }
    }
    let room = (ctx - prompt_len) as u64;
    let n = requested.or(default).unwrap_or(room).min(room);
    Ok(n.min(u64::from(u32::MAX)) as u32)
}

fn prepare_chat(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Prepared, ApiError> {
    let v = parse_json(body)?;
    let req: ChatRequest = typed(&v)?;
    check_model(app, &req.model)?;
    let common = typed::<SamplingFields>(&v)?.validate()?;
    let (requested, param) = match (req.max_completion_tokens, req.max_tokens) {
        (Some(n), _) => (
            api::max_tokens(Some(n), "max_completion_tokens")?,
            "max_completion_tokens",
        ),
        (None, n) => (api::max_tokens(n, "max_tokens")?, "max_tokens"),
    };
    let chat = req.prompt()?;
    let text = app.engine.render_chat(&chat)?;
    let prompt = app.engine.tokenize(&text)?;
    let max_tokens = budget(app, prompt.len(), requested, None, param, "messages")?;
    Ok(Prepared {
        kind: Kind::Chat,
        common,
        prompt,
        max_tokens,
    })
}

/// OpenAI's default for text completions.
const COMPLETION_DEFAULT_MAX_TOKENS: u64 = 16;

fn prepare_text(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Prepared, ApiError> {
    let v = parse_json(body)?;
    let req: CompletionRequest = typed(&v)?;
    check_model(app, &req.model)?;
    let common = typed::<SamplingFields>(&v)?.validate()?;
    let requested = api::max_tokens(req.max_tokens, "max_tokens")?;
    let prompt = match req.prompt_input()? {
        PromptInput::Text(t) => app.engine.tokenize(&t)?,
        PromptInput::Tokens(ids) => {
            let vocab = app.engine.vocab_size();
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::invalid(format!(
                    "token id {bad} is outside the vocabulary ({vocab} tokens)"
                ))
                .param("prompt"));
            }
            ids
        }
    };
    let max_tokens = budget(
        app,
        prompt.len(),
        requested,
        Some(COMPLETION_DEFAULT_MAX_TOKENS),
        "max_tokens",
        "prompt",
    )?;
    Ok(Prepared {
        kind: Kind::Text,
        common,
        prompt,
        max_tokens,
    })
}

pub async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match prepare_chat(&app, body) {
        Ok(p) => respond(app, p).await,
        Err(e) => e.into_response(),
    }
}

pub async fn completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match prepare_text(&app, body) {
        Ok(p) => respond(app, p).await,
        Err(e) => e.into_response(),
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The identity every chunk of one response repeats.
struct Ids {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: u32,
}

impl Ids {
    fn new(app: &App, kind: Kind, prompt_tokens: u32) -> Self {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Text => "cmpl",
        };
        Ids {
            kind,
            id: format!("{prefix}-{:x}{n:06x}", app.started_unix_s),
            created: unix_now_s(),
            model: app.config.model_id.clone(),
            prompt_tokens,
        }
    }

    fn usage(&self, completion_tokens: u32) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    /// One streamed chunk with `choice` (or none, for the usage chunk).
    fn chunk(&self, choice: Option<Value>, usage: Option<Value>, with_usage: bool) -> String {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        };
        let mut c = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": Value::Null,
            "choices": choice.map(|c| vec![c]).unwrap_or_default(),
        });
        if with_usage {
            c["usage"] = usage.unwrap_or(Value::Null);
        }
        c.to_string()
    }

    fn delta_choice(&self, text: Option<&str>, role: bool, finish: Option<FinishReason>) -> Value {
        let finish = finish.map(FinishReason::as_str);
        match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), Value::from("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), Value::from(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": finish})
            }
            Kind::Text => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": Value::Null, "finish_reason": finish})
            }
        }
    }

    fn whole(&self, text: String, completion_tokens: u32, finish: FinishReason) -> Value {
        let (object, choice) = match self.kind {
            Kind::Chat => (
                "chat.completion",
                json!({
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": Value::Null,
                    "finish_reason": finish.as_str(),
                }),
            ),
            Kind::Text => (
                "text_completion",
                json!({
                    "index": 0,
                    "text": text,
                    "logprobs": Value::Null,
                    "finish_reason": finish.as_str(),
                }),
            ),
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": Value::Null,
            "choices": [choice],
            "usage": self.usage(completion_tokens),
        })
    }
}

async fn respond(app: Arc<App>, p: Prepared) -> Response {
    let prompt_tokens = p.prompt.len() as u32;
    let cancel = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        req: GenRequest {
            prompt: p.prompt,
            max_tokens: p.max_tokens,
            sampling: p.common.sampling.clone(),
        },
        stop: p.common.stop.clone(),
        cancel: cancel.clone(),
        events: tx,
    };
    if let Err(e) = app.queue.submit(job) {
        return e.into_response();
    }
    app.metrics.prompt_tokens.inc_by(u64::from(prompt_tokens));
    let guard = CancelOnDrop(cancel);
    let ids = Ids::new(&app, p.kind, prompt_tokens);
    if p.common.stream {
        stream(ids, rx, guard, p.common.include_usage).into_response()
    } else {
        collect(ids, rx, guard).await
    }
}

async fn collect(ids: Ids, mut rx: UnboundedReceiver<Event>, _guard: CancelOnDrop) -> Response {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done {
                completion_tokens,
                finish,
            }) => {
                return axum::Json(ids.whole(text, completion_tokens, finish)).into_response();
            }
            Some(Event::Error(e)) => return e.into_response(),
            None => {
                return ApiError::internal("the generation ended without a result").into_response();
            }
        }
    }
}

struct Streaming {
    ids: Ids,
    rx: UnboundedReceiver<Event>,
    _guard: CancelOnDrop,
    include_usage: bool,
    pending: VecDeque<String>,
    ended: bool,
}

/// Server-sent events: (chat) a role chunk, content chunks, a chunk with `finish_reason`, the
/// usage chunk when asked, then `data: [DONE]`. A failure after the headers is an `error` chunk,
/// then `[DONE]`.
fn stream(
    ids: Ids,
    rx: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    include_usage: bool,
) -> impl IntoResponse {
    let mut pending = VecDeque::new();
    if ids.kind == Kind::Chat {
        pending.push_back(ids.chunk(
            Some(ids.delta_choice(Some(""), true, None)),
            None,
            include_usage,
        ));
    }
    let st = Streaming {
        ids,
        rx,
        _guard: guard,
        include_usage,
        pending,
        ended: false,
    };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st));
            }
            if st.ended {
                return None;
            }
            let u = st.include_usage;
            match st.rx.recv().await {
                Some(Event::Text(t)) => {
                    let c = st.ids.delta_choice(Some(&t), false, None);
                    st.pending.push_back(st.ids.chunk(Some(c), None, u));
                }
                Some(Event::Done {
                    completion_tokens,
                    finish,
                }) => {
                    let c = st.ids.delta_choice(None, false, Some(finish));
                    st.pending.push_back(st.ids.chunk(Some(c), None, u));
                    if u {
                        let usage = st.ids.usage(completion_tokens);
                        st.pending.push_back(st.ids.chunk(None, Some(usage), true));
                    }
                    st.pending.push_back("[DONE]".to_string());
                    st.ended = true;
                }
                Some(Event::Error(e)) => {
                    st.pending.push_back(e.body_json());
                    st.pending.push_back("[DONE]".to_string());
                    st.ended = true;
                }
                None => {
                    let e = ApiError::internal("the generation ended without a result");
                    st.pending.push_back(e.body_json());
                    st.pending.push_back("[DONE]".to_string());
                    st.ended = true;
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
