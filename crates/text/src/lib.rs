//! Text in, text out for tally: the tokenizer stored in a GGUF's `tokenizer.ggml.*` metadata
//! (gpt2-style byte-level BPE with Qwen's pre-tokenizer split) and the chat template stored in
//! `tokenizer.chat_template` (Jinja, rendered with minijinja).
//!
//! Both read only metadata, so they work on vocab-only files as well as on full models.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = tally_gguf::GgufFile::open(std::path::Path::new("model.gguf"))?;
//! let tok = tally_text::Tokenizer::from_gguf(&file)?;
//! let ids = tok.encode("Hello, world!", true);
//! assert_eq!(String::from_utf8_lossy(&tok.decode(&ids)), "Hello, world!");
//! # Ok(()) }
//! ```

mod bpe;
mod bytelevel;
mod error;
mod pretok;
mod stream;
mod template;
mod tokenizer;

pub use error::TextError;
pub use pretok::PreTokenizer;
pub use stream::StreamDecoder;
pub use template::{ChatMessage, ChatRequest, ChatTemplate};
pub use tokenizer::{TokenType, Tokenizer};
