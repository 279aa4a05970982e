//! Tokenizer metadata for synthetic models. tally and the ledger feed token ids, never text, so a
//! synthetic file carries no vocabulary: llama.cpp's loader accepts `tokenizer.ggml.model = "none"`
//! with the vocabulary size in `qwen35moe.vocab_size` (docs/peer-llama.md, recipe A), for the
//! real 248,320 ids as for a tiny model, and writing a quarter-million dummy strings buys nothing.

use tally_gguf::MetaValue;

use crate::config::ARCH;

/// The tokenizer keys for a vocabulary of `n_vocab` ids.
pub fn metadata(n_vocab: usize) -> Vec<(String, MetaValue)> {
    vec![
        (
            "tokenizer.ggml.model".into(),
            MetaValue::String("none".into()),
        ),
        (format!("{ARCH}.vocab_size"), MetaValue::U32(n_vocab as u32)),
    ]
}
