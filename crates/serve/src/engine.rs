//! The narrow interface the server needs from an engine: a tokenizer, a chat template, and one
//! generation at a time with a token callback and a cancel flag. The real engine (tally-text and
//! the generation API) implements it in the CLI; [`crate::fake::FakeEngine`] implements it for
//! tests.

use std::sync::atomic::AtomicBool;

/// Sampling parameters of one request, already validated by the server (ranges as OpenAI's).
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 means greedy. Range [0, 2].
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 disables it.
    pub top_p: f32,
    /// Keep the k most likely tokens; 0 disables it.
    pub top_k: u32,
    /// Drop tokens below `min_p` times the top probability; 0 disables it. Range [0, 1].
    pub min_p: f32,
    /// OpenAI's additive penalties, range [-2, 2]; 0 disables them.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Multiplicative (llama.cpp/HF style) penalty, > 0; 1 disables it.
    pub repetition_penalty: f32,
    /// Seed of the sampler; `None` lets the engine pick one.
    pub seed: Option<u64>,
    /// Keep generating past an end-of-generation token until `max_tokens` (an extension of
    /// vLLM and llama.cpp's servers, for benchmarks).
    pub ignore_eos: bool,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: None,
            ignore_eos: false,
        }
    }
}

/// One generation: the prompt's token ids, at most `max_tokens` new tokens.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub prompt: Vec<u32>,
    /// At least 1; prompt length + max_tokens never exceeds the context (the server checks).
    pub max_tokens: u32,
    pub sampling: Sampling,
}

/// One generated token and the text it completes. `text` is empty while a UTF-8 character is
/// split across tokens (the engine's stream decoder holds the bytes back), and it never contains
/// the text of end-of-generation tokens. `token` is `None` for a final flush of held-back text.
#[derive(Debug, Clone, Copy)]
pub struct Piece<'a> {
    pub token: Option<u32>,
    pub text: &'a str,
}

/// What the token callback tells the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop now (a stop string matched, or the client went away).
    Stop,
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFinish {
    /// An end-of-generation token (EOS/EOT) was sampled.
    Eos,
    /// `max_tokens` were generated (or the context is full).
    Length,
    /// The callback returned [`Flow::Stop`].
    Stopped,
    /// The cancel flag was seen set.
    Cancelled,
}

/// The outcome of a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenStats {
    /// Tokens sampled, the end-of-generation token included.
    pub completion_tokens: u32,
    pub finish: EngineFinish,
}

/// An engine failure; `BadRequest` is the client's fault (e.g. a chat the template rejects).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Internal(String),
}

/// A chat to render with the model's template. Messages and tools are OpenAI's JSON objects, passed
/// through as the client sent them (validated for roles and shapes by the server).
#[derive(Debug, Clone)]
pub struct ChatPrompt {
    pub messages: Vec<serde_json::Value>,
    pub tools: Option<Vec<serde_json::Value>>,
    pub tool_choice: Option<serde_json::Value>,
    pub add_generation_prompt: bool,
    pub enable_thinking: Option<bool>,
    /// Every other `chat_template_kwargs` entry, for the template.
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
}

/// The engine the server drives. `generate` is called from one worker thread at a time (the
/// server serialises requests through its queue), the rest from any thread.
pub trait Generator: Send + Sync + 'static {
    /// Positions the engine holds: prompt + generated tokens must fit.
    fn context_length(&self) -> usize;
    /// Token ids are below this.
    fn vocab_size(&self) -> usize;
    /// Token ids of `text`; special tokens written in the text (e.g. `<|im_start|>`) are parsed
    /// as such, since rendered chat templates contain them.
    fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError>;
    /// The chat as the model's template renders it.
    fn render_chat(&self, chat: &ChatPrompt) -> Result<String, EngineError>;
    /// Generates after `req.prompt`, calling `on_piece` once per sampled token (not for the
    /// end-of-generation token). Checks `cancel` at least once per token and returns
    /// [`EngineFinish::Cancelled`] when it is set.
    fn generate(
        &self,
        req: &GenRequest,
        cancel: &AtomicBool,
        on_piece: &mut dyn FnMut(Piece<'_>) -> Flow,
    ) -> Result<GenStats, EngineError>;
}
