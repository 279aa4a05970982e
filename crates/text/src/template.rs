//! Chat templates: the Jinja in `tokenizer.chat_template`, rendered with minijinja the way
//! transformers' `apply_chat_template` renders it with jinja2: `trim_blocks` and
//! `lstrip_blocks` on, Python's string methods (`.startswith`, `.split`, `.strip`...) through
//! minijinja-contrib's pycompat, `raise_exception`, and a `tojson` that writes what Python's
//! `json.dumps(x, ensure_ascii=False)` writes (`", "` and `": "` separators, keys in the order
//! given, no HTML escaping).

use std::path::Path;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use tally_gguf::{GgufFile, MetaValue};

use crate::TextError;

/// One message of a conversation, in the OpenAI chat format the templates expect. Fields that
/// are `None` are absent from the template's view (`message.reasoning_content is defined` is
/// false), as they are in a Python dict that lacks the key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// A string, a list of content parts (`{"type": "text", "text": ...}`), or null.
    #[serde(default)]
    pub content: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// OpenAI tool calls: `{"type": "function", "function": {"name", "arguments"}}`. Arguments
    /// given as a JSON string holding an object are passed to the template as that object
    /// (templates iterate them with `|items`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with plain-text content.
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: serde_json::Value::String(content.to_string()),
            ..ChatMessage::default()
        }
    }
}

/// Everything a template sees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// Tool definitions (a list of OpenAI `{"type": "function", "function": {...}}` objects).
    #[serde(default)]
    pub tools: Option<serde_json::Value>,
    /// End with the header of an assistant turn, so the model writes the answer.
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Qwen's switch for the reasoning block; `None` leaves it undefined (the template's default,
    /// thinking on for Qwen3.5/3.6).
    #[serde(default)]
    pub enable_thinking: Option<bool>,
    /// Further template variables (transformers' `**kwargs`), e.g. `add_vision_id`.
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles a template from its source.
    pub fn new(source: &str) -> Result<ChatTemplate, TextError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| TextError::TemplateSyntax(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            bos_token: None,
            eos_token: None,
        })
    }

    /// The template in `tokenizer.chat_template`, with `bos_token` / `eos_token` set to the
    /// text of the file's BOS/EOS tokens (as transformers passes them). Fails with
    /// [`TextError::NoTemplate`] when the key is absent.
    pub fn from_gguf(file: &GgufFile) -> Result<ChatTemplate, TextError> {
        let src = file
            .get("tokenizer.chat_template")
            .and_then(MetaValue::as_str)
            .ok_or_else(|| TextError::NoTemplate {
                path: file.path().to_path_buf(),
            })?;
        let mut t = ChatTemplate::new(src)?;
        let token_text = |key: &str| -> Option<String> {
            let id = file.get(key)?.as_u64()? as usize;
            let toks = file
                .get("tokenizer.ggml.tokens")?
                .as_array()?
                .as_strings()?;
            toks.get(id).cloned()
        };
        t.bos_token = token_text("tokenizer.ggml.bos_token_id");
        t.eos_token = token_text("tokenizer.ggml.eos_token_id");
        Ok(t)
    }

    /// Reads a template from a file (`--template FILE`).
    pub fn from_file(path: &Path) -> Result<ChatTemplate, TextError> {
        let src = std::fs::read_to_string(path).map_err(|e| {
            TextError::TemplateSyntax(format!("cannot read {}: {e}", path.display()))
        })?;
        ChatTemplate::new(&src)
    }

    /// Sets the `bos_token` / `eos_token` variables.
    pub fn with_special_tokens(mut self, bos: Option<&str>, eos: Option<&str>) -> ChatTemplate {
        self.bos_token = bos.map(str::to_string);
        self.eos_token = eos.map(str::to_string);
        self
    }

    /// Renders the prompt text (to be encoded with `parse_special = true`).
    pub fn render(&self, req: &ChatRequest) -> Result<String, TextError> {
        let mut ctx = req.extra.clone();
        let mut messages = serde_json::to_value(&req.messages)
            .map_err(|e| TextError::TemplateRender(e.to_string()))?;
        if let Some(list) = messages.as_array_mut() {
            list.iter_mut().for_each(parse_string_arguments);
        }
        ctx.insert("messages".into(), messages);
        ctx.insert(
            "tools".into(),
            req.tools.clone().unwrap_or(serde_json::Value::Null),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            req.add_generation_prompt.into(),
        );
        if let Some(on) = req.enable_thinking {
            ctx.insert("enable_thinking".into(), on.into());
        }
        for (k, v) in [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
        ] {
            if let Some(v) = v {
                ctx.entry(k).or_insert_with(|| v.clone().into());
            }
        }
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TextError::TemplateRender(describe(&e)))?;
        tmpl.render(Value::from_serialize(&ctx))
            .map_err(|e| TextError::TemplateRender(describe(&e)))
    }
}

/// OpenAI clients send tool-call arguments as a JSON string; templates want the object.
fn parse_string_arguments(msg: &mut serde_json::Value) {
    let Some(calls) = msg.get_mut("tool_calls").and_then(|c| c.as_array_mut()) else {
        return;
    };
    for call in calls {
        let target = match call.get_mut("function") {
            Some(f) => f,
            None => call,
        };
        if let Some(args) = target.get_mut("arguments")
            && let Some(s) = args.as_str()
            && let Ok(v @ serde_json::Value::Object(_)) = serde_json::from_str(s)
        {
            *args = v;
        }
    }
}

/// An error with its cause chain (minijinja puts the template line in the causes).
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(&format!(": {c}"));
        src = c.source();
    }
    s
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `json.dumps(value, ensure_ascii=False)` (or with `indent=n`), as transformers' `tojson`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let res = match indent {
        None => value.serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, PyCompact,
        )),
        Some(n) => {
            let pad = vec![b' '; n];
            let f = serde_json::ser::PrettyFormatter::with_indent(&pad);
            value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))
        }
    };
    res.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let s = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(s))
}

/// Python's default `json.dumps` separators: `", "` between items, `": "` after keys.
struct PyCompact;

impl serde_json::ser::Formatter for PyCompact {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}
