//! One engine, a bounded queue: past it 429 with `Retry-After`; a client that disconnects
//! mid-stream cancels its generation and the next request is served; shutdown is graceful.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{MODEL, Server, eventually, metric, request_bytes};
use serde_json::json;
use tally_serve::fake::FakeEngine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn slow(delay_ms: u64) -> FakeEngine {
    let mut e = FakeEngine::new(100_000);
    e.token_delay = Duration::from_millis(delay_ms);
    e
}

fn stream_body(max_tokens: u32) -> String {
    json!({"model": MODEL, "stream": true, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Hi"}]})
    .to_string()
}

/// Opens a streaming request and reads until `events` SSE events have arrived; returns the open
/// connection.
async fn open_stream(s: &Server, events: usize) -> TcpStream {
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let body = stream_body(100_000);
    c.write_all(&request_bytes(
        s.addr,
        "POST",
        "/v1/chat/completions",
        body.as_bytes(),
    ))
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while String::from_utf8_lossy(&seen).matches("data: ").count() < events {
            let n = c.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "stream closed early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no events");
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_mid_stream_cancels_the_generation() {
    let s = Server::start(slow(20), 4).await;
    // The role chunk and two content chunks, then the client goes away.
    let c = open_stream(&s, 3).await;
    drop(c);
    let (e, app) = (s.engine.clone(), s.app.clone());
    eventually("the generation to be cancelled", || {
        app.metrics.running.get() == 0
            && app.metrics.finished.with_label_values(&["cancelled"]).get() == 1
    })
    .await;
    // It stopped promptly: far fewer tokens than the 100000 it was allowed, and no more after.
    let n = e.stats.tokens.load(Ordering::Relaxed);
    assert!(n < 50, "{n} tokens");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(e.stats.tokens.load(Ordering::Relaxed), n);
    let m = s.metrics().await;
    assert_eq!(
        metric(&m, r#"tally_generations_total{reason="cancelled"}"#),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "tally_requests_running"), 0.0);
    // The server is still up and serves the next request.
    let r = s
        .post(
            "/v1/chat/completions",
            &json!({"model": MODEL, "max_tokens": 3,
            "messages": [{"role": "user", "content": "again"}]})
            .to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_is_429_with_retry_after() {
    let s = Server::start(slow(10), 1).await;
    let running = open_stream(&s, 2).await;
    // Running: one. Waiting: the queue's one place, taken by a second request.
    let waiting = tokio::spawn({
        let addr = s.addr;
        async move {
            common::request(
                addr,
                "POST",
                "/v1/chat/completions",
                stream_body(2).as_bytes(),
            )
            .await
        }
    });
    let app = s.app.clone();
    eventually("the second request to wait", || {
        app.metrics.queue_depth.get() == 1
    })
    .await;
    let r = s.post("/v1/chat/completions", &stream_body(2)).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    let v = r.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "queue_full");
    assert_eq!(metric(&s.metrics().await, "tally_queue_depth"), 1.0);
    // Once the running stream goes, the waiting one is served in full.
    drop(running);
    let w = waiting.await.unwrap();
    assert_eq!(w.status, 200);
    assert_eq!(w.sse().last().unwrap(), "[DONE]");
    let m = s.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"tally_requests_total{endpoint="/v1/chat/completions",status="429"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_request_whose_client_left_never_runs() {
    let s = Server::start(slow(10), 4).await;
    let running = open_stream(&s, 2).await;
    let mut queued = TcpStream::connect(s.addr).await.unwrap();
    queued
        .write_all(&request_bytes(
            s.addr,
            "POST",
            "/v1/chat/completions",
            stream_body(5).as_bytes(),
        ))
        .await
        .unwrap();
    let app = s.app.clone();
    eventually("the request to wait", || app.metrics.queue_depth.get() == 1).await;
    drop(queued);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(running);
    let e = s.engine.clone();
    eventually("both to end", || {
        app.metrics.queue_depth.get() == 0 && app.metrics.running.get() == 0
    })
    .await;
    // The running one was cancelled; the queued one was skipped without starting.
    assert_eq!(e.stats.started.load(Ordering::Relaxed), 1);
    let m = s.metrics().await;
    assert_eq!(
        metric(&m, r#"tally_generations_total{reason="cancelled"}"#),
        2.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_and_the_server() {
    let mut s = Server::start(slow(10), 4).await;
    let mut c = open_stream(&s, 2).await;
    s.shutdown();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest))
        .await
        .expect("stream did not end")
        .unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("shutting_down"), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    tokio::time::timeout(Duration::from_secs(10), &mut s.handle)
        .await
        .expect("server did not stop")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(s.addr).await.is_err(), "still listening");
}
