//! Tokenizer metadata for synthetic models. tally and the ledger feed token ids, never text, so
//! the vocabulary only has to satisfy llama.cpp's loader (see docs/peer-llama.md).

use tally_gguf::{MetaArray, MetaValue};

/// `tokenizer.ggml.*` keys for a vocabulary of `n_vocab` ids.
pub fn metadata(n_vocab: usize) -> Vec<(String, MetaValue)> {
    let tokens: Vec<String> = (0..n_vocab).map(|i| format!("<t{i}>")).collect();
    let types: Vec<i32> = vec![1; n_vocab];
    let eos = n_vocab.saturating_sub(1) as u32;
    vec![
        (
            "tokenizer.ggml.model".into(),
            MetaValue::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".into(),
            MetaValue::String("qwen2".into()),
        ),
        (
            "tokenizer.ggml.tokens".into(),
            MetaValue::Array(MetaArray::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            MetaValue::Array(MetaArray::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            MetaValue::Array(MetaArray::String(Vec::new())),
        ),
        ("tokenizer.ggml.bos_token_id".into(), MetaValue::U32(eos)),
        ("tokenizer.ggml.eos_token_id".into(), MetaValue::U32(eos)),
        (
            "tokenizer.ggml.padding_token_id".into(),
            MetaValue::U32(eos),
        ),
    ]
}
