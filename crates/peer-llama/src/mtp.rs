//! llama.cpp's MTP draft head (`LLAMA_CONTEXT_TYPE_MTP`, the `graph_mtp` of
//! `src/models/qwen35moe.cpp`) as an oracle: logits of the head for given (token, hidden state)
//! pairs, for comparison with tally's own MTP step on the same file.

use std::path::Path;

use crate::PeerError;
use crate::ffi::{Context, Model};

/// A model loaded with its MTP layers and one MTP context over it (CPU).
pub struct LlamaMtp {
    // Declared first: the context is dropped before the model it points into.
    ctx: Context,
    model: Model,
}

impl LlamaMtp {
    /// Loads `path` with its MTP layers and makes an MTP context of `n_ctx` positions.
    pub fn open(path: &Path, n_ctx: u32, threads: i32) -> Result<LlamaMtp, PeerError> {
        let model = Model::load_with_mtp(path)?;
        let ctx = Context::new_mtp(&model, n_ctx, threads)?;
        Ok(LlamaMtp { ctx, model })
    }

    pub fn n_vocab(&self) -> u32 {
        self.model.n_vocab()
    }

    /// One decode of the head: `tokens[i]` at position `pos0 + i` with row i of `hidden` (the
    /// hidden state of the position before it, `n_embd` values a row); the logits of every
    /// row (each scores the token after `tokens[i]`). The context's cache keeps the rows.
    pub fn decode(
        &mut self,
        tokens: &[u32],
        pos0: u32,
        hidden: &[f32],
        n_embd: usize,
    ) -> Result<Vec<Vec<f32>>, PeerError> {
        let v = self.model.n_vocab();
        self.ctx.mtp_decode(tokens, pos0, hidden, n_embd, v)
    }
}
