//! tally's OpenAI-compatible server: `POST /v1/chat/completions` and `POST /v1/completions`
//! (JSON or server-sent events), `GET /v1/models`, `GET /health` and `GET /metrics`
//! (Prometheus text).
//!
//! The server is written against [`engine::Generator`], a narrow trait: a tokenizer, the chat
//! template, and one generation at a time with a token callback and a cancel flag. One engine
//! runs one request at a time; the others wait in a bounded queue ([`server::Config::queue`]),
//! and past it a request gets 429 with `Retry-After`. A client that disconnects mid-stream stops
//! its generation at the next token.

pub mod api;
pub mod engine;
pub mod error;
pub mod fake;
mod handlers;
pub mod metrics;
pub mod queue;
pub mod server;
pub mod stop;

pub use engine::{
    ChatPrompt, EngineError, EngineFinish, Flow, GenRequest, GenStats, Generator, Piece, Sampling,
};
pub use error::ApiError;
pub use server::{App, Config, router, serve, shutdown_signal};
