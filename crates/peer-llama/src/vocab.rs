//! llama.cpp's tokenizer alone: a GGUF loaded `vocab_only` (no tensor data, so vocab-only files
//! work), used as the oracle for tally's tokenizer (`llama_tokenize`, `llama_token_to_piece`).

use std::path::Path;

use crate::PeerError;
use crate::ffi::Model;

/// A vocabulary loaded by llama.cpp.
pub struct LlamaVocab {
    model: Model,
}

impl LlamaVocab {
    /// Loads the metadata and vocabulary of `path` only.
    pub fn open(path: &Path) -> Result<LlamaVocab, PeerError> {
        Ok(LlamaVocab {
            model: Model::load_vocab_only(path)?,
        })
    }

    /// Number of tokens.
    pub fn n_vocab(&self) -> u32 {
        self.model.n_vocab()
    }

    /// Token ids of `text` (any bytes), no BOS/EOS added; with `parse_special`, control
    /// tokens' text becomes those tokens.
    pub fn tokenize(&self, text: &[u8], parse_special: bool) -> Result<Vec<u32>, PeerError> {
        self.model.tokenize(text, parse_special)
    }

    /// The bytes token `id` stands for; control tokens render as their text when `special`,
    /// else as nothing.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>, PeerError> {
        self.model.token_to_piece(id, special)
    }
}
