//! OpenAI's request bodies, parsed leniently (unknown fields are ignored, `null` is absent) and
//! validated into what the engine runs. Every rejection is a 400 naming the offending `param`.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::engine::{ChatPrompt, Sampling};
use crate::error::ApiError;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// The sampling fields chat and text completions share (parsed from the same body as the request,
/// separately, so that errors name the field: serde's `flatten` would lose the path).
#[derive(Debug, Default, Deserialize)]
pub struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Extension (vLLM, llama.cpp): 0 or -1 disables it.
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// Extension (vLLM, llama.cpp).
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub logit_bias: Option<Map<String, Value>>,
    /// Extension (vLLM, llama.cpp): generate past EOS/EOT until the token limit.
    pub ignore_eos: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Value>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub logprobs: Option<bool>,
    pub response_format: Option<Value>,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Value,
    pub max_tokens: Option<i64>,
    pub echo: Option<bool>,
    pub logprobs: Option<i64>,
    pub best_of: Option<i64>,
    pub suffix: Option<String>,
}

/// Most stop strings a request may carry (OpenAI allows 4; a few more cost nothing).
pub const MAX_STOPS: usize = 16;

/// The validated, engine-independent part of a request.
#[derive(Debug)]
pub struct Common {
    pub sampling: Sampling,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

fn range(v: Option<f64>, name: &str, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    let x = v.unwrap_or(default);
    if !(lo..=hi).contains(&x) {
        return Err(
            ApiError::invalid(format!("{name} must be between {lo} and {hi}, got {x}"))
                .param(name)
                .code("invalid_value"),
        );
    }
    Ok(x as f32)
}

impl SamplingFields {
    pub fn validate(&self) -> Result<Common, ApiError> {
        match self.n {
            None | Some(1) => {}
            Some(n) => {
                return Err(ApiError::invalid(format!(
                    "n={n} is not supported: this server generates one choice per request (n=1)"
                ))
                .param("n")
                .code("invalid_value"));
            }
        }
        if self.logit_bias.as_ref().is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::invalid("logit_bias is not supported").param("logit_bias"));
        }
        let top_p = range(self.top_p, "top_p", 0.0, 1.0, 1.0)?;
        if top_p == 0.0 {
            return Err(ApiError::invalid("top_p must be greater than 0")
                .param("top_p")
                .code("invalid_value"));
        }
        let top_k = match self.top_k {
            None | Some(-1) => 0,
            Some(k) if (0..=u32::MAX as i64).contains(&k) => k as u32,
            Some(k) => {
                return Err(
                    ApiError::invalid(format!("top_k must be -1, 0 or positive, got {k}"))
                        .param("top_k")
                        .code("invalid_value"),
                );
            }
        };
        let repetition_penalty = range(
            self.repetition_penalty,
            "repetition_penalty",
            0.0,
            10.0,
            1.0,
        )?;
        if repetition_penalty == 0.0 {
            return Err(
                ApiError::invalid("repetition_penalty must be greater than 0")
                    .param("repetition_penalty")
                    .code("invalid_value"),
            );
        }
        let sampling = Sampling {
            temperature: range(self.temperature, "temperature", 0.0, 2.0, 1.0)?,
            top_p,
            top_k,
            min_p: range(self.min_p, "min_p", 0.0, 1.0, 0.0)?,
            presence_penalty: range(self.presence_penalty, "presence_penalty", -2.0, 2.0, 0.0)?,
            frequency_penalty: range(self.frequency_penalty, "frequency_penalty", -2.0, 2.0, 0.0)?,
            repetition_penalty,
            // Any integer is a seed; negative ones keep their bits.
            seed: self.seed.map(|s| s as u64),
            ignore_eos: self.ignore_eos.unwrap_or(false),
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS {
            return Err(ApiError::invalid(format!(
                "at most {MAX_STOPS} stop strings are supported, got {}",
                stop.len()
            ))
            .param("stop"));
        }
        if stop.iter().any(|s| s.is_empty()) {
            return Err(ApiError::invalid("stop strings must not be empty").param("stop"));
        }
        let stream = self.stream.unwrap_or(false);
        let include_usage = self
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        Ok(Common {
            sampling,
            stop,
            stream,
            include_usage,
        })
    }
}

/// A `max_tokens`-like field: absent, or at least 1.
pub fn max_tokens(v: Option<i64>, name: &str) -> Result<Option<u64>, ApiError> {
    match v {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err(
            ApiError::invalid(format!("{name} must be at least 1, got {n}"))
                .param(name)
                .code("invalid_value"),
        ),
    }
}

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// Checks each message's role and content and normalises what templates do not expect:
/// `developer` becomes `system`, a list of text parts becomes one string, and tool-call
/// `arguments` sent as a JSON string become the object templates iterate over.
pub fn normalise_messages(messages: &[Value]) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages must not be empty").param("messages"));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let p = |f: &str| format!("messages.[{i}].{f}");
        let Some(obj) = m.as_object() else {
            return Err(
                ApiError::invalid(format!("messages[{i}] must be an object"))
                    .param(format!("messages.[{i}]")),
            );
        };
        let mut obj = obj.clone();
        let role = match obj.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => r.to_string(),
            Some(r) => {
                return Err(ApiError::invalid(format!(
                    "messages[{i}].role `{r}` is not one of system, developer, user, assistant, tool"
                ))
                .param(p("role")));
            }
            None => {
                return Err(
                    ApiError::invalid(format!("messages[{i}] has no string `role`"))
                        .param(p("role")),
                );
            }
        };
        if role == "developer" {
            obj.insert("role".into(), Value::from("system"));
        }
        let content = match obj.get("content") {
            None | Some(Value::Null) => {
                let calls = obj.get("tool_calls").is_some_and(|c| !c.is_null());
                if role != "assistant" || !calls {
                    return Err(ApiError::invalid(format!(
                        "messages[{i}].content is required (only an assistant message with tool_calls may omit it)"
                    ))
                    .param(p("content")));
                }
                Value::from("")
            }
            Some(Value::String(s)) => Value::from(s.as_str()),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.iter().enumerate() {
                    match (
                        part.get("type").and_then(Value::as_str),
                        part.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        (ty, _) => {
                            return Err(ApiError::invalid(format!(
                                "messages[{i}].content[{j}]: only text parts are supported, got {}",
                                ty.unwrap_or("a part without a type")
                            ))
                            .param(format!("messages.[{i}].content.[{j}]")));
                        }
                    }
                }
                Value::from(text)
            }
            Some(_) => {
                return Err(ApiError::invalid(format!(
                    "messages[{i}].content must be a string or a list of text parts"
                ))
                .param(p("content")));
            }
        };
        obj.insert("content".into(), content);
        if let Some(calls) = obj.get_mut("tool_calls") {
            normalise_tool_calls(calls, i)?;
        }
        out.push(Value::Object(obj));
    }
    Ok(out)
}

fn normalise_tool_calls(calls: &mut Value, i: usize) -> Result<(), ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "messages[{i}].tool_calls must be a list of {{\"type\":\"function\",\"function\":{{\"name\",\"arguments\"}}}}"
        ))
        .param(format!("messages.[{i}].tool_calls"))
    };
    let Some(list) = calls.as_array_mut() else {
        return Err(bad());
    };
    for c in list {
        let f = c.get_mut("function").ok_or_else(bad)?;
        if !f.get("name").is_some_and(Value::is_string) {
            return Err(bad());
        }
        if let Some(Value::String(s)) = f.get("arguments") {
            // Templates iterate over the arguments; OpenAI sends them as a JSON string.
            if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s) {
                f["arguments"] = v;
            }
        }
    }
    Ok(())
}

impl ChatRequest {
    /// The chat for the template.
    pub fn prompt(&self) -> Result<ChatPrompt, ApiError> {
        if self.logprobs == Some(true) {
            return Err(ApiError::invalid("logprobs are not supported").param("logprobs"));
        }
        if let Some(rf) = &self.response_format {
            if rf.get("type").and_then(Value::as_str) != Some("text") {
                return Err(ApiError::invalid(
                    "response_format other than {\"type\":\"text\"} is not supported",
                )
                .param("response_format"));
            }
        }
        if let Some(tools) = &self.tools {
            for (i, t) in tools.iter().enumerate() {
                if !t.pointer("/function/name").is_some_and(Value::is_string) {
                    return Err(ApiError::invalid(format!(
                        "tools[{i}] must be {{\"type\":\"function\",\"function\":{{\"name\":...}}}}"
                    ))
                    .param(format!("tools.[{i}]")));
                }
            }
        }
        let mut kwargs = self.chat_template_kwargs.clone().unwrap_or_default();
        let enable_thinking = match kwargs.remove("enable_thinking") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(b),
            Some(_) => {
                return Err(ApiError::invalid(
                    "chat_template_kwargs.enable_thinking must be a boolean",
                )
                .param("chat_template_kwargs.enable_thinking"));
            }
        };
        // `tool_choice: "none"` means the model must not call tools: the template gets none.
        let tools = match self.tool_choice.as_ref().and_then(Value::as_str) {
            Some("none") => None,
            _ => self.tools.clone().filter(|t| !t.is_empty()),
        };
        Ok(ChatPrompt {
            messages: normalise_messages(&self.messages)?,
            tools,
            tool_choice: self.tool_choice.clone(),
            add_generation_prompt: true,
            enable_thinking,
            template_kwargs: kwargs,
        })
    }
}

/// A completion prompt: text, or token ids.
#[derive(Debug, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

impl CompletionRequest {
    /// The one prompt of the request (a list must hold exactly one prompt: n=1, no batching).
    pub fn prompt_input(&self) -> Result<PromptInput, ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::invalid("echo is not supported").param("echo"));
        }
        if self.logprobs.is_some_and(|n| n > 0) {
            return Err(ApiError::invalid("logprobs are not supported").param("logprobs"));
        }
        if self.best_of.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid("best_of other than 1 is not supported").param("best_of"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid("suffix is not supported").param("suffix"));
        }
        let bad = || {
            ApiError::invalid(
                "prompt must be a string, a list of one string, a list of token ids, or a list of one list of token ids",
            )
            .param("prompt")
        };
        let ids = |v: &Vec<Value>| -> Result<Vec<u32>, ApiError> {
            v.iter()
                .map(|x| {
                    x.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(bad)
                })
                .collect()
        };
        match &self.prompt {
            Value::String(s) => Ok(PromptInput::Text(s.clone())),
            Value::Array(v) if v.len() == 1 && v[0].is_string() => Ok(PromptInput::Text(
                v[0].as_str().unwrap_or_default().to_string(),
            )),
            Value::Array(v) if v.len() == 1 && v[0].is_array() => match &v[0] {
                Value::Array(inner) => Ok(PromptInput::Tokens(ids(inner)?)),
                _ => Err(bad()),
            },
            Value::Array(v) if !v.is_empty() && v.iter().all(Value::is_number) => {
                Ok(PromptInput::Tokens(ids(v)?))
            }
            Value::Array(v) if v.len() > 1 => Err(ApiError::invalid(
                "a list of several prompts is not supported: send one prompt per request",
            )
            .param("prompt")),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_normalised() {
        let m = normalise_messages(&[
            json!({"role":"developer","content":"be brief"}),
            json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}),
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}),
            json!({"role":"tool","tool_call_id":"c1","content":"2"}),
        ])
        .unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "ab");
        assert_eq!(m[2]["content"], "");
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);
    }

    #[test]
    fn bad_messages_name_their_param() {
        let e = normalise_messages(&[json!({"role":"robot","content":"x"})]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages.[0].role"));
        let e = normalise_messages(&[json!({"role":"user"})]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages.[0].content"));
        let e = normalise_messages(&[json!({"role":"user","content":[{"type":"image_url"}]})])
            .unwrap_err();
        assert!(e.message.contains("image_url"), "{}", e.message);
        assert!(normalise_messages(&[]).is_err());
    }

    #[test]
    fn prompt_shapes() {
        let req = |p: Value| CompletionRequest {
            model: "m".into(),
            prompt: p,
            max_tokens: None,
            echo: None,
            logprobs: None,
            best_of: None,
            suffix: None,
        };
        assert_eq!(
            req(json!("hi")).prompt_input().unwrap(),
            PromptInput::Text("hi".into())
        );
        assert_eq!(
            req(json!(["hi"])).prompt_input().unwrap(),
            PromptInput::Text("hi".into())
        );
        assert_eq!(
            req(json!([1, 2])).prompt_input().unwrap(),
            PromptInput::Tokens(vec![1, 2])
        );
        assert_eq!(
            req(json!([[3]])).prompt_input().unwrap(),
            PromptInput::Tokens(vec![3])
        );
        assert!(req(json!(["a", "b"])).prompt_input().is_err());
        assert!(req(json!([-1])).prompt_input().is_err());
        assert!(req(json!(5)).prompt_input().is_err());
    }

    #[test]
    fn sampling_ranges() {
        let f = |v: Value| {
            serde_json::from_value::<SamplingFields>(v)
                .unwrap()
                .validate()
        };
        assert!(f(json!({})).is_ok());
        assert_eq!(
            f(json!({"temperature": 3})).unwrap_err().param.as_deref(),
            Some("temperature")
        );
        assert_eq!(f(json!({"n": 2})).unwrap_err().param.as_deref(), Some("n"));
        assert_eq!(
            f(json!({"top_p": 0})).unwrap_err().param.as_deref(),
            Some("top_p")
        );
        assert_eq!(
            f(json!({"stop": [""]})).unwrap_err().param.as_deref(),
            Some("stop")
        );
        let c = f(json!({"top_k": -1, "stop": "x", "seed": -3, "stream": true})).unwrap();
        assert_eq!(c.sampling.top_k, 0);
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert_eq!(c.sampling.seed, Some(u64::MAX - 2));
        assert!(c.stream);
    }
}
