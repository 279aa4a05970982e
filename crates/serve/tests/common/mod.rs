//! A loopback server over the fake engine, and a minimal HTTP/1.1 client (one request per
//! connection) that sees the bytes exactly as sent, SSE framing included.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tally_serve::fake::FakeEngine;
use tally_serve::{App, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const MODEL: &str = "tiny";

pub struct Server {
    pub addr: SocketAddr,
    pub engine: Arc<FakeEngine>,
    pub app: Arc<App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub handle: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    pub async fn start(engine: FakeEngine, queue: usize) -> Server {
        let mut cfg = Config::new(MODEL);
        cfg.queue = queue;
        cfg.body_limit_bytes = 64 << 10;
        let engine = Arc::new(engine);
        let app = App::new(engine.clone(), cfg);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(tally_serve::serve(listener, app.clone(), async move {
            let _ = rx.await;
        }));
        Server {
            addr,
            engine,
            app,
            stop: Some(tx),
            handle,
        }
    }

    /// Triggers the graceful shutdown.
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    pub async fn post(&self, path: &str, body: &str) -> Resp {
        request(self.addr, "POST", path, body.as_bytes()).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        request(self.addr, "GET", path, b"").await
    }

    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.body
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of an SSE body, checking the framing: every event is one `data:`
    /// line (or a keep-alive comment) followed by a blank line.
    pub fn sse(&self) -> Vec<String> {
        assert!(
            self.body.ends_with("\n\n"),
            "SSE body must end with a blank line"
        );
        let mut out = Vec::new();
        for ev in self.body.split("\n\n").filter(|e| !e.is_empty()) {
            if ev.starts_with(':') {
                continue;
            }
            let data = ev
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event is not `data: `: {ev:?}"));
            assert!(!data.contains('\n'), "one line per event: {ev:?}");
            out.push(data.to_string());
        }
        out
    }
}

pub fn request_bytes(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

pub async fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&request_bytes(addr, method, path, body))
            .await
            .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        parse_response(&raw)
    };
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("request timed out")
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("no header end");
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let Some((size, rest)) = s.split_once("\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

/// Polls `f` until it is true or 10 s pass.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The value of a metric line `name{labels} value` (or `name value`), 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}
