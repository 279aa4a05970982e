//! A deterministic engine for tests: one token per character of the prompt, and a fixed script of
//! words as output (multi-byte characters split across tokens included), at a configurable pace.
//! It counts what it did so tests can check cancellation.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::{
    ChatPrompt, EngineError, EngineFinish, Flow, GenRequest, GenStats, Generator, Piece,
};

/// What the fake engine emits, one piece per token. The empty piece stands for the first half of
/// a UTF-8 character (a stream decoder holds its bytes back), the next piece completes it.
pub const SCRIPT: &[&str] = &[
    "Hello", ",", " world", ".", " Caf", "é", " ", "", "🦀", " END", " done", "\n", "The", " end",
    ".",
];

/// Counters of the fake engine's work.
#[derive(Debug, Default)]
pub struct FakeStats {
    pub started: AtomicU64,
    pub cancelled: AtomicU64,
    pub completed: AtomicU64,
    pub tokens: AtomicU64,
}

pub struct FakeEngine {
    pub context_length: usize,
    /// Pause before each token (tests of queueing and disconnects need generations that last).
    pub token_delay: Duration,
    /// Sample the end-of-generation token after this many tokens.
    pub eos_after: Option<u32>,
    /// Fail with an internal error after this many tokens.
    pub fail_after: Option<u32>,
    pub stats: FakeStats,
    /// The last chat the template rendered, and the last request generated.
    pub last_chat: Mutex<Option<ChatPrompt>>,
    pub last_request: Mutex<Option<GenRequest>>,
}

/// Token id of the fake end-of-generation token (never emitted as text).
pub const FAKE_EOS: u32 = 0x11_0000;

impl FakeEngine {
    pub fn new(context_length: usize) -> Self {
        FakeEngine {
            context_length,
            token_delay: Duration::ZERO,
            eos_after: None,
            fail_after: None,
            stats: FakeStats::default(),
            last_chat: Mutex::new(None),
            last_request: Mutex::new(None),
        }
    }
}

impl Generator for FakeEngine {
    fn context_length(&self) -> usize {
        self.context_length
    }

    fn vocab_size(&self) -> usize {
        FAKE_EOS as usize + 1
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, EngineError> {
        Ok(text.chars().map(u32::from).collect())
    }

    fn render_chat(&self, chat: &ChatPrompt) -> Result<String, EngineError> {
        let mut s = String::new();
        if let Some(tools) = &chat.tools {
            s.push_str("<|im_start|>system\n<tools>");
            for t in tools {
                s.push_str(&t.to_string());
            }
            s.push_str("</tools><|im_end|>\n");
        }
        for m in &chat.messages {
            let role = m["role"].as_str().unwrap_or_default();
            let content = m["content"].as_str().unwrap_or_default();
            s.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
        }
        if chat.messages.last().is_some_and(|m| m["role"] == "system") {
            return Err(EngineError::BadRequest(
                "No user query found in messages.".into(),
            ));
        }
        if chat.add_generation_prompt {
            s.push_str("<|im_start|>assistant\n");
            if chat.enable_thinking == Some(false) {
                s.push_str("<think>\n\n</think>\n\n");
            }
        }
        if let Ok(mut l) = self.last_chat.lock() {
            *l = Some(chat.clone());
        }
        Ok(s)
    }

    fn generate(
        &self,
        req: &GenRequest,
        cancel: &AtomicBool,
        on_piece: &mut dyn FnMut(Piece<'_>) -> Flow,
    ) -> Result<GenStats, EngineError> {
        self.stats.started.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.last_request.lock() {
            *l = Some(req.clone());
        }
        // Greedy starts the script at its top; a seed shifts it, so seeds are reproducible.
        let offset = if req.sampling.temperature == 0.0 {
            0
        } else {
            req.sampling.seed.unwrap_or(0) as usize % SCRIPT.len()
        };
        let mut n = 0u32;
        let finish = loop {
            if cancel.load(Ordering::Acquire) {
                self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
                break EngineFinish::Cancelled;
            }
            if n >= req.max_tokens {
                break EngineFinish::Length;
            }
            if !self.token_delay.is_zero() {
                std::thread::sleep(self.token_delay);
            }
            if self.fail_after == Some(n) {
                return Err(EngineError::Internal("fake engine failure".into()));
            }
            n += 1;
            self.stats.tokens.fetch_add(1, Ordering::Relaxed);
            if self.eos_after == Some(n - 1) && !req.sampling.ignore_eos {
                break EngineFinish::Eos;
            }
            let text = SCRIPT[(offset + n as usize - 1) % SCRIPT.len()];
            if on_piece(Piece {
                token: Some(n),
                text,
            }) == Flow::Stop
            {
                break EngineFinish::Stopped;
            }
        };
        if finish != EngineFinish::Cancelled {
            self.stats.completed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(GenStats {
            completion_tokens: n,
            finish,
        })
    }
}

/// The Python the end-to-end client tests run `tools/serve/e2e.py` with: `TALLY_E2E_PYTHON`
/// (scripts/test.sh makes a venv with `openai`), else `python3` if it imports `openai`, else
/// `None` (skip), except under CI, where a missing client is a failure.
pub fn e2e_python() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("TALLY_E2E_PYTHON") {
        return Some(p.into());
    }
    let ok = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some("python3".into());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI needs TALLY_E2E_PYTHON (a Python with `openai`; scripts/test.sh sets it up)"
    );
    None
}
