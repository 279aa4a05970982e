//! Turning a stream of token ids into text without ever printing half a character.

use crate::Tokenizer;

/// Decodes token ids one at a time into complete UTF-8. A character whose bytes are split across
/// tokens is held back until its last byte arrives; bytes that can never form a character (an
/// invalid sequence) come out as U+FFFD as soon as that is certain, so the stream never stalls.
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
    skip_control: bool,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder that prints every token, special tokens' text included.
    pub fn new(tok: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            pending: Vec::new(),
            skip_control: false,
        }
    }

    /// Drop control tokens (`<|im_end|>`...) from the text, as llama.cpp's
    /// `llama_token_to_piece(.., special = false)` does.
    pub fn skip_control(mut self, on: bool) -> StreamDecoder<'a> {
        self.skip_control = on;
        self
    }

    /// Adds one token; returns the text that became complete, if any.
    pub fn push(&mut self, id: u32) -> Option<String> {
        if self.skip_control && self.tok.is_control(id) {
            return None;
        }
        self.pending.extend_from_slice(self.tok.token_piece(id));
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let good = start + e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..good]).unwrap_or_default(),
                    );
                    match e.error_len() {
                        // Invalid here whatever follows.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = good + n;
                        }
                        // A character cut short at the end: wait for the next token.
                        None => {
                            start = good;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        (!out.is_empty()).then_some(out)
    }

    /// The end of the stream: whatever is held back (an incomplete character) as U+FFFD.
    pub fn flush(&mut self) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Some(s)
    }
}
