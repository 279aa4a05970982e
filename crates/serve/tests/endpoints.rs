//! Every endpoint over the fake engine: OpenAI's response and chunk shapes, SSE framing, usage,
//! stop strings, finish reasons, and what reaches the engine and the template.

mod common;

use common::{MODEL, Server, metric};
use serde_json::{Value, json};
use tally_serve::fake::{FakeEngine, SCRIPT};

fn script(n: usize) -> String {
    SCRIPT.iter().cycle().take(n).copied().collect()
}

/// The fake template's rendering of one user message, in tokens (one per character).
fn chat_tokens(user: &str) -> u64 {
    format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
        .chars()
        .count() as u64
}

fn chat_body(extra: Value) -> String {
    let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b.to_string()
}

#[tokio::test]
async fn chat_completion_has_openai_shape_and_usage() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let r = s
        .post("/v1/chat/completions", &chat_body(json!({"max_tokens": 4})))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], MODEL);
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert_eq!(c["message"]["content"], script(4));
    assert_eq!(c["finish_reason"], "length");
    let p = chat_tokens("Hi");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": p, "completion_tokens": 4, "total_tokens": p + 4})
    );
}

#[tokio::test]
async fn chat_stream_chunks_then_finish_then_done() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let r = s
        .post(
            "/v1/chat/completions",
            &chat_body(json!({"max_tokens": 9, "stream": true})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = r.sse();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let id = chunks[0]["id"].clone();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], id, "one id per stream");
        assert_eq!(c["model"], MODEL);
        assert!(c.get("usage").is_none(), "no usage without include_usage");
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    let mid = &chunks[1..chunks.len() - 1];
    assert!(
        mid.iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    let text: String = mid
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    // The empty piece (half a character) is not sent as a chunk of its own.
    assert_eq!(text, script(9));
    assert_eq!(mid.len(), 8);
}

#[tokio::test]
async fn stream_usage_chunk_when_asked() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let body = chat_body(
        json!({"max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let data = s.post("/v1/chat/completions", &body).await.sse();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let (usage, rest) = chunks.split_last().unwrap();
    assert!(
        rest.iter()
            .all(|c| c["usage"].is_null() && c.get("usage").is_some())
    );
    assert_eq!(usage["choices"], json!([]));
    let p = chat_tokens("Hi");
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": p, "completion_tokens": 3, "total_tokens": p + 3})
    );
}

#[tokio::test]
async fn text_completion_plain_and_streamed() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let r = s
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": "abc"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    // OpenAI's default max_tokens for completions is 16.
    assert_eq!(v["choices"][0]["text"], script(16));
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let body = json!({"model": MODEL, "prompt": [[104, 105]], "max_tokens": 5, "stream": true,
        "stream_options": {"include_usage": true}});
    let data = s.post("/v1/completions", &body.to_string()).await.sse();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let n = chunks.len();
    let text: String = chunks[..n - 2]
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, script(5));
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[n - 1]["usage"]["prompt_tokens"], 2);
}

#[tokio::test]
async fn stop_strings_and_eos_finish_with_stop() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    for stop in [json!(" END"), json!(["zzz", " EN"])] {
        let v = s
            .post(
                "/v1/chat/completions",
                &chat_body(json!({"stop": stop, "max_tokens": 100})),
            )
            .await
            .json();
        assert_eq!(
            v["choices"][0]["message"]["content"],
            "Hello, world. Café 🦀"
        );
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["completion_tokens"], 10);
    }
    // Streamed, the stop string is held back across chunks and never sent.
    let body = chat_body(json!({"stop": "d.", "stream": true, "max_tokens": 100}));
    let data = s.post("/v1/chat/completions", &body).await.sse();
    let text: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(text, "Hello, worl");

    let mut e = FakeEngine::new(512);
    e.eos_after = Some(2);
    let s = Server::start(e, 4).await;
    let v = s
        .post("/v1/chat/completions", &chat_body(json!({})))
        .await
        .json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello,");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 3, "the EOS token counts");
    // ignore_eos (vLLM and llama.cpp's extension): the limit ends it, not the EOS.
    let v = s
        .post(
            "/v1/chat/completions",
            &chat_body(json!({"ignore_eos": true, "max_tokens": 6})),
        )
        .await
        .json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    let bad = s
        .post(
            "/v1/chat/completions",
            &chat_body(json!({"ignore_eos": "yes"})),
        )
        .await;
    assert_eq!(bad.status, 400, "a non-boolean ignore_eos is a bad request");
}

#[tokio::test]
async fn sampling_fields_reach_the_engine() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let body = chat_body(
        json!({"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 7,
        "max_completion_tokens": 2, "n": 1, "user": "ignored", "logprobs": false}),
    );
    let v = s.post("/v1/chat/completions", &body).await.json();
    assert_eq!(v["usage"]["completion_tokens"], 2);
    let req = s.engine.last_request.lock().unwrap().clone().unwrap();
    let sp = req.sampling;
    assert_eq!(
        (sp.temperature, sp.top_p, sp.top_k, sp.min_p),
        (0.7, 0.9, 40, 0.05)
    );
    assert_eq!((sp.presence_penalty, sp.frequency_penalty), (0.5, -0.5));
    assert_eq!((sp.repetition_penalty, sp.seed), (1.1, Some(7)));
    assert_eq!(req.max_tokens, 2);
    // Same seed, same text; the fake shifts its script by the seed.
    let again = s.post("/v1/chat/completions", &body).await.json();
    assert_eq!(again["choices"], v["choices"]);
}

#[tokio::test]
async fn tools_roles_and_thinking_reach_the_template() {
    let s = Server::start(FakeEngine::new(4096), 4).await;
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let body = json!({"model": MODEL, "tools": [tool], "tool_choice": "auto",
        "chat_template_kwargs": {"enable_thinking": false, "custom": 1},
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]});
    let r = s.post("/v1/chat/completions", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let chat = s.engine.last_chat.lock().unwrap().clone().unwrap();
    assert_eq!(
        chat.tools.as_ref().unwrap()[0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(chat.tool_choice, Some(json!("auto")));
    assert_eq!(chat.enable_thinking, Some(false));
    assert_eq!(chat.template_kwargs["custom"], 1);
    assert!(chat.add_generation_prompt);
    let roles: Vec<&str> = chat
        .messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(
        chat.messages[2]["tool_calls"][0]["function"]["arguments"]["city"],
        "Paris"
    );

    let mut none = body.clone();
    none["tool_choice"] = json!("none");
    s.post("/v1/chat/completions", &none.to_string()).await;
    assert!(
        s.engine
            .last_chat
            .lock()
            .unwrap()
            .clone()
            .unwrap()
            .tools
            .is_none()
    );
}

#[tokio::test]
async fn models_health_and_metrics() {
    let s = Server::start(FakeEngine::new(512), 4).await;
    let v = s.get("/v1/models").await.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], MODEL);
    assert_eq!(v["data"][0]["object"], "model");
    assert_eq!(v["data"][0]["owned_by"], "tally");
    assert_eq!(
        s.get(&format!("/v1/models/{MODEL}")).await.json()["id"],
        MODEL
    );
    let h = s.get("/health").await;
    assert_eq!((h.status, h.json()["status"].clone()), (200, json!("ok")));

    s.post("/v1/chat/completions", &chat_body(json!({"max_tokens": 5})))
        .await;
    s.post("/v1/chat/completions", &chat_body(json!({"model": "nope"})))
        .await;
    let m = s.get("/metrics").await;
    assert!(
        m.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let t = m.body;
    let ok = r#"tally_requests_total{endpoint="/v1/chat/completions",status="200"}"#;
    let nf = r#"tally_requests_total{endpoint="/v1/chat/completions",status="404"}"#;
    assert_eq!(metric(&t, ok), 1.0, "{t}");
    assert_eq!(metric(&t, nf), 1.0, "{t}");
    assert_eq!(metric(&t, "tally_generated_tokens_total"), 5.0);
    assert_eq!(
        metric(&t, "tally_prompt_tokens_total"),
        chat_tokens("Hi") as f64
    );
    assert_eq!(metric(&t, "tally_queue_depth"), 0.0);
    assert_eq!(metric(&t, "tally_time_to_first_token_seconds_count"), 1.0);
    assert_eq!(metric(&t, "tally_decode_tokens_per_second_count"), 1.0);
    assert_eq!(
        metric(&t, r#"tally_generations_total{reason="length"}"#),
        1.0
    );
    assert!(t.contains("# TYPE tally_time_to_first_token_seconds histogram"));
}
