//! Bad requests get 4xx with OpenAI's error body, `{"error":{"message","type","param","code"}}`;
//! engine failures are 500 (or an error chunk once a stream has started). Nothing panics.

mod common;

use common::{MODEL, Server, metric};
use serde_json::{Value, json};
use tally_serve::fake::FakeEngine;

/// Asserts status and OpenAI's error shape; returns the `error` object.
fn error(r: &common::Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let v = r.json();
    let e = v["error"].clone();
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    e
}

async fn chat(s: &Server, body: Value) -> common::Resp {
    s.post("/v1/chat/completions", &body.to_string()).await
}

fn user(extra: Value) -> Value {
    let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn malformed_json_and_wrong_shapes_are_400() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    for bad in [
        "{\"model\": ",
        "not json",
        "",
        "[1,2]",
        "{\"model\": \"tiny\", }",
    ] {
        let e = error(&s.post("/v1/chat/completions", bad).await, 400);
        assert_eq!(e["type"], "invalid_request_error");
    }
    let e = error(
        &s.post("/v1/chat/completions", "{\"model\": \"tiny\"").await,
        400,
    );
    assert_eq!(e["code"], "invalid_json");

    let e = error(&chat(&s, json!({"model": MODEL})).await, 400);
    assert!(e["message"].as_str().unwrap().contains("messages"), "{e}");
    let e = error(&chat(&s, json!({"messages": []})).await, 400);
    assert!(e["message"].as_str().unwrap().contains("model"), "{e}");
    let e = error(&chat(&s, user(json!({"temperature": "hot"}))).await, 400);
    assert_eq!(e["param"], "temperature");
    let e = error(&chat(&s, user(json!({"max_tokens": 1.5}))).await, 400);
    assert_eq!(e["param"], "max_tokens");
    let e = error(
        &chat(&s, json!({"model": MODEL, "messages": "hi"})).await,
        400,
    );
    assert_eq!(e["param"], "messages");
    let e = error(
        &chat(&s, json!({"model": MODEL, "messages": []})).await,
        400,
    );
    assert_eq!(e["param"], "messages");
    let e = error(
        &chat(
            &s,
            json!({"model": MODEL, "messages": [{"role": "bot", "content": "x"}]}),
        )
        .await,
        400,
    );
    assert_eq!(e["param"], "messages.[0].role");
    let e = error(
        &s.post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": {"a": 1}}).to_string(),
        )
        .await,
        400,
    );
    assert_eq!(e["param"], "prompt");
    let e = error(
        &s.post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": ["a", "b"]}).to_string(),
        )
        .await,
        400,
    );
    assert_eq!(e["param"], "prompt");
    let e = error(
        &s.post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": [1, 9999999]}).to_string(),
        )
        .await,
        400,
    );
    assert!(e["message"].as_str().unwrap().contains("vocabulary"), "{e}");
}

#[tokio::test]
async fn out_of_range_and_unsupported_fields_are_400() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    for (field, value) in [
        ("temperature", json!(2.5)),
        ("top_p", json!(0)),
        ("top_k", json!(-2)),
        ("min_p", json!(1.5)),
        ("presence_penalty", json!(-3)),
        ("frequency_penalty", json!(9)),
        ("repetition_penalty", json!(0)),
        ("n", json!(2)),
        ("stop", json!([""])),
        ("max_tokens", json!(0)),
        ("max_completion_tokens", json!(-5)),
        ("logprobs", json!(true)),
        ("response_format", json!({"type": "json_object"})),
        ("logit_bias", json!({"1": 5})),
    ] {
        let e = error(&chat(&s, user(json!({field: value}))).await, 400);
        assert_eq!(e["param"], field, "{field}: {e}");
    }
    let e = error(&chat(&s, user(json!({"stop": vec!["x"; 17]}))).await, 400);
    assert_eq!(e["param"], "stop");
}

#[tokio::test]
async fn unknown_model_is_404_model_not_found() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let e = error(&chat(&s, user(json!({"model": "gpt-4o"}))).await, 404);
    assert_eq!(
        (e["code"].clone(), e["param"].clone()),
        (json!("model_not_found"), json!("model"))
    );
    let r = s
        .post(
            "/v1/completions",
            &json!({"model": "x", "prompt": "a"}).to_string(),
        )
        .await;
    assert_eq!(error(&r, 404)["code"], "model_not_found");
    assert_eq!(
        error(&s.get("/v1/models/gpt-4o").await, 404)["code"],
        "model_not_found"
    );
}

#[tokio::test]
async fn context_overflow_is_400_and_max_tokens_is_clamped_to_what_is_left() {
    let s = Server::start(FakeEngine::new(64), 4).await;
    let long = "x".repeat(100);
    let e = error(
        &chat(
            &s,
            json!({"model": MODEL, "messages": [{"role": "user", "content": long}]}),
        )
        .await,
        400,
    );
    assert_eq!(
        (e["code"].clone(), e["param"].clone()),
        (json!("context_length_exceeded"), json!("messages"))
    );
    let r = s
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": "y".repeat(64)}).to_string(),
        )
        .await;
    assert_eq!(error(&r, 400)["code"], "context_length_exceeded");
    let e = error(
        &s.post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": ""}).to_string(),
        )
        .await,
        400,
    );
    assert_eq!(e["param"], "prompt");
    // More than the whole context can never be served: 400.
    let e = error(&chat(&s, user(json!({"max_tokens": 65}))).await, 400);
    assert_eq!(e["param"], "max_tokens");
    // Within the context but past what the prompt leaves: clamped, finish_reason "length".
    let r = s
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": "z".repeat(60), "max_tokens": 64}).to_string(),
        )
        .await;
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn oversized_body_is_413_and_unknown_routes_are_404_405() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let big = json!({"model": MODEL, "prompt": "a".repeat(70 << 10)}).to_string();
    let e = error(&s.post("/v1/completions", &big).await, 413);
    assert_eq!(e["code"], "request_too_large");
    assert_eq!(
        error(&s.get("/v2/nothing").await, 404)["code"],
        "unknown_url"
    );
    assert_eq!(
        error(&s.get("/v1/chat/completions").await, 405)["code"],
        "method_not_allowed"
    );
    assert_eq!(
        error(&s.post("/v1/models", "{}").await, 405)["code"],
        "method_not_allowed"
    );
    assert!(
        metric(
            &s.metrics().await,
            r#"tally_requests_total{endpoint="/v1/completions",status="413"}"#
        ) == 1.0
    );
}

#[tokio::test]
async fn template_rejection_is_400() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    // The fake template, like Qwen's, rejects a chat without a user turn.
    let r = chat(
        &s,
        json!({"model": MODEL, "messages": [{"role": "system", "content": "x"}]}),
    )
    .await;
    assert!(
        error(&r, 400)["message"]
            .as_str()
            .unwrap()
            .contains("No user query")
    );
}

#[tokio::test]
async fn engine_failure_is_500_or_an_error_chunk_and_the_server_stays_up() {
    let mut e = FakeEngine::new(512);
    e.fail_after = Some(3);
    let s = Server::start(e, 4).await;
    let e = error(&chat(&s, user(json!({}))).await, 500);
    assert_eq!(e["type"], "server_error");
    let r = chat(&s, user(json!({"stream": true}))).await;
    assert_eq!(r.status, 200);
    let data = r.sse();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let err: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(err["error"]["type"], "server_error");
    let content: usize = data
        .iter()
        .filter(|d| d.contains("\"content\":\"") && !d.contains("\"content\":\"\""))
        .count();
    assert_eq!(content, 3, "three tokens went out before the failure");
    let ok = s
        .post(
            "/v1/chat/completions",
            &user(json!({"max_tokens": 2})).to_string(),
        )
        .await;
    assert_eq!(ok.status, 200);
}
