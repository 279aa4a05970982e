//! The router, the shared state, and serving with graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::engine::Generator;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::queue::Queue;

/// What the server is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The id clients must send as `model` (the file's stem, or `--alias`).
    pub model_id: String,
    /// Requests that may wait while one runs; past it, 429.
    pub queue: usize,
    /// Largest request body accepted, bytes; past it, 413.
    pub body_limit_bytes: usize,
}

impl Config {
    pub fn new(model_id: impl Into<String>) -> Self {
        Config {
            model_id: model_id.into(),
            queue: 16,
            body_limit_bytes: 8 << 20,
        }
    }
}

/// State every handler shares.
pub struct App {
    pub engine: Arc<dyn Generator>,
    pub config: Config,
    pub queue: Queue,
    pub metrics: Arc<Metrics>,
    /// Unix seconds the server started (the model's `created`).
    pub started_unix_s: u64,
}

pub fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl App {
    /// Starts the engine's worker thread.
    pub fn new(engine: Arc<dyn Generator>, config: Config) -> Arc<Self> {
        let metrics = Arc::new(Metrics::new());
        let queue = Queue::start(engine.clone(), config.queue, metrics.clone());
        Arc::new(App {
            engine,
            config,
            queue,
            metrics,
            started_unix_s: unix_now_s(),
        })
    }

    pub fn model_not_found(&self, name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "The model `{name}` does not exist; this server serves `{}`",
                self.config.model_id
            ),
        )
        .param("model")
        .code("model_not_found")
    }
}

/// Every route. Unknown paths and methods get OpenAI-style 404/405 bodies.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.body_limit_bytes;
    Router::new()
        .route("/v1/chat/completions", post(crate::handlers::chat))
        .route("/v1/completions", post(crate::handlers::completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), count))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// Counts every answered request by route and status.
async fn count(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".to_string());
    let resp = next.run(req).await;
    app.metrics
        .requests
        .with_label_values(&[endpoint.as_str(), resp.status().as_str()])
        .inc();
    resp
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no route {} {}", req.method(), req.uri().path()),
    )
    .code("unknown_url")
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
    .code("method_not_allowed")
}

fn model_json(app: &App) -> serde_json::Value {
    json!({
        "id": app.config.model_id,
        "object": "model",
        "created": app.started_unix_s,
        "owned_by": "tally",
        "context_length": app.engine.context_length(),
    })
}

async fn models(State(app): State<Arc<App>>) -> Response {
    axum::Json(json!({"object": "list", "data": [model_json(&app)]})).into_response()
}

async fn model(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    if name != app.config.model_id {
        return app.model_not_found(&name).into_response();
    }
    axum::Json(model_json(&app)).into_response()
}

async fn health(State(app): State<Arc<App>>) -> Response {
    axum::Json(json!({
        "status": "ok",
        "model": app.config.model_id,
        "queue_depth": app.metrics.queue_depth.get(),
        "running": app.metrics.running.get(),
    }))
    .into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

/// Serves `app` on `listener` until `shutdown` completes; then refuses new requests, stops the
/// running generation, lets open responses finish, and stops the worker.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app2 = app.clone();
    let signal = async move {
        shutdown.await;
        // Stopping the queue blocks until the generation sees its flag: off the async threads.
        let a = app2.clone();
        let _ = tokio::task::spawn_blocking(move || a.queue.shutdown()).await;
    };
    axum::serve(listener, router(app))
        .with_graceful_shutdown(signal)
        .await
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
