//! The tokenizer a GGUF describes in `tokenizer.ggml.*`: gpt2-style byte-level BPE.
//!
//! Encoding, in order: special tokens are cut out of the text first (they never go through the
//! split or the merges); each stretch between them is normalised to NFC (as Qwen's
//! `tokenizer.json` does; llama.cpp does not, see [`Tokenizer::with_nfc`]), split into words by
//! the pre-tokenizer, and each word's UTF-8 bytes are merged by rank.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;
use tally_gguf::{GgufFile, MetaValue};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

use crate::TextError;
use crate::bpe::{Merges, Scratch, merge_word};
use crate::bytelevel::{byte_to_char, decode_token};
use crate::pretok::{PreTokenizer, Splitter};

/// A token's type, from `tokenizer.ggml.token_type` (llama.cpp's numbering, 1..=6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// Ordinary vocabulary entry, stored in the byte-level alphabet.
    Normal,
    Unknown,
    /// Special token (`<|im_start|>`...), stored as plain text. Matched in the input only when
    /// `parse_special` is set.
    Control,
    /// Added token, stored as plain text; always matched in the input (as llama.cpp does).
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(v: i64) -> TokenType {
        match v {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            // 1 is normal; 0 ("undefined") is what converters write when they know no better.
            _ => TokenType::Normal,
        }
    }

    /// Stored as plain text rather than in the byte-level alphabet.
    fn is_plain_text(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unused | TokenType::Unknown
        )
    }
}

/// A table of special tokens to cut out of the input before splitting.
#[derive(Debug, Clone)]
struct SpecialMatcher {
    /// `None` when there is nothing to match.
    ac: Option<AhoCorasick>,
    /// Token id of each pattern.
    ids: Vec<u32>,
}

impl SpecialMatcher {
    fn new(pieces: &[Box<[u8]>], types: &[TokenType], want: impl Fn(TokenType) -> bool) -> Self {
        let mut seen = FxHashMap::default();
        let mut pats: Vec<&[u8]> = Vec::new();
        let mut ids = Vec::new();
        for (id, (p, &t)) in pieces.iter().zip(types).enumerate() {
            if want(t) && !p.is_empty() && seen.insert(&p[..], ()).is_none() {
                pats.push(p);
                ids.push(id as u32);
            }
        }
        // Leftmost-longest, as HF tokenizers matches added tokens.
        let ac = if pats.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&pats)
                .ok()
        };
        SpecialMatcher { ac, ids }
    }
}

/// A byte-level BPE tokenizer read from a GGUF. Cheap to share across threads (`Sync`).
#[derive(Clone)]
pub struct Tokenizer {
    /// Bytes of each token (the byte-level alphabet decoded; special tokens as their text).
    pieces: Vec<Box<[u8]>>,
    types: Vec<TokenType>,
    /// Id of the single-byte token for each byte.
    byte_ids: [u32; 256],
    merges: Merges,
    pre: PreTokenizer,
    splitter: Splitter,
    nfc: bool,
    /// Control and user-defined tokens (`parse_special = true`).
    special_all: SpecialMatcher,
    /// User-defined tokens only (`parse_special = false`).
    special_user: SpecialMatcher,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.pieces.len())
            .field("merges", &self.merges.len())
            .field("pre", &self.pre)
            .field("nfc", &self.nfc)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .finish()
    }
}

/// Words at most this long are remembered within one `encode` call (longer ones are rare and
/// rarely repeat).
const CACHE_MAX_WORD_BYTES: usize = 64;

fn meta_err(path: &Path, key: &'static str, reason: impl Into<String>) -> TextError {
    TextError::Metadata {
        path: path.to_path_buf(),
        key,
        reason: reason.into(),
    }
}

fn opt_id(file: &GgufFile, key: &'static str, n: usize) -> Result<Option<u32>, TextError> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if (id as usize) < n => Ok(Some(id as u32)),
            Some(id) => Err(meta_err(
                file.path(),
                key,
                format!("token id {id} is outside the vocabulary of {n} tokens"),
            )),
            None => Err(meta_err(
                file.path(),
                key,
                format!("expected an integer, found {}", v.type_name()),
            )),
        },
    }
}

impl Tokenizer {
    /// Reads the tokenizer from a GGUF's metadata (no tensor data is touched, so vocab-only
    /// files work). Fails with [`TextError::NoVocabulary`] when the file has none,
    /// [`TextError::UnsupportedModel`] / [`TextError::UnsupportedPre`] for tokenizers tally does
    /// not implement, and [`TextError::Metadata`] when the tables are inconsistent.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TextError> {
        let path = file.path();
        let model = match file.get("tokenizer.ggml.model").and_then(MetaValue::as_str) {
            None => "absent".to_string(),
            Some(m) => m.to_string(),
        };
        if model == "absent" || model == "none" || file.get("tokenizer.ggml.tokens").is_none() {
            return Err(TextError::NoVocabulary {
                path: path.to_path_buf(),
                model: if model == "absent" {
                    model
                } else {
                    format!("{model:?}")
                },
            });
        }
        if model != "gpt2" {
            return Err(TextError::UnsupportedModel {
                path: path.to_path_buf(),
                model,
            });
        }
        let pre_name = file
            .get("tokenizer.ggml.pre")
            .and_then(MetaValue::as_str)
            .unwrap_or("(absent)");
        let pre =
            PreTokenizer::from_gguf_name(pre_name).ok_or_else(|| TextError::UnsupportedPre {
                path: path.to_path_buf(),
                pre: pre_name.to_string(),
            })?;

        let tokens = file
            .get("tokenizer.ggml.tokens")
            .and_then(MetaValue::as_array)
            .and_then(|a| a.as_strings())
            .ok_or_else(|| {
                meta_err(
                    path,
                    "tokenizer.ggml.tokens",
                    "expected an array of strings",
                )
            })?;
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(meta_err(
                path,
                "tokenizer.ggml.tokens",
                format!("{n} tokens"),
            ));
        }
        let types: Vec<TokenType> = match file.get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(v) => {
                let a = v.as_array().ok_or_else(|| {
                    meta_err(
                        path,
                        "tokenizer.ggml.token_type",
                        "expected an integer array",
                    )
                })?;
                if a.len() != n {
                    return Err(meta_err(
                        path,
                        "tokenizer.ggml.token_type",
                        format!("{} entries for {n} tokens", a.len()),
                    ));
                }
                let ints = a.as_i32s().ok_or_else(|| {
                    meta_err(path, "tokenizer.ggml.token_type", "expected an i32 array")
                })?;
                ints.iter()
                    .map(|&t| TokenType::from_gguf(t.into()))
                    .collect()
            }
        };
        let pieces: Vec<Box<[u8]>> = tokens
            .iter()
            .zip(&types)
            .map(|(s, t)| {
                if t.is_plain_text() {
                    s.as_bytes().into()
                } else {
                    decode_token(s).into_boxed_slice()
                }
            })
            .collect();

        // Merges are written in the byte-level alphabet, like the normal tokens they join.
        let mut by_text: FxHashMap<&str, u32> = FxHashMap::default();
        for (id, (s, t)) in tokens.iter().zip(&types).enumerate() {
            if !t.is_plain_text() {
                by_text.entry(s.as_str()).or_insert(id as u32);
            }
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let c = byte_to_char(b as u8);
            *slot = *by_text.get(c.encode_utf8(&mut [0; 4]) as &str).ok_or_else(|| {
                meta_err(
                    path,
                    "tokenizer.ggml.tokens",
                    format!("no token for byte 0x{b:02X} ({c:?}); a byte-level vocabulary has all 256"),
                )
            })?;
        }
        let merge_strs = file
            .get("tokenizer.ggml.merges")
            .and_then(MetaValue::as_array)
            .and_then(|a| a.as_strings())
            .ok_or_else(|| {
                meta_err(
                    path,
                    "tokenizer.ggml.merges",
                    "expected an array of strings",
                )
            })?;
        let mut merges = Merges::default();
        let mut joined = String::new();
        for (rank, m) in merge_strs.iter().enumerate() {
            let Some((l, r)) = m.split_once(' ') else {
                return Err(meta_err(
                    path,
                    "tokenizer.ggml.merges",
                    format!("entry {rank} ({m:?}) is not two tokens separated by a space"),
                ));
            };
            joined.clear();
            joined.push_str(l);
            joined.push_str(r);
            // A merge whose sides or result are not in the vocabulary can never apply.
            if let (Some(&li), Some(&ri), Some(&mi)) =
                (by_text.get(l), by_text.get(r), by_text.get(joined.as_str()))
            {
                merges.insert(li, ri, rank as u32, mi);
            }
        }

        let bos = opt_id(file, "tokenizer.ggml.bos_token_id", n)?;
        let eos = opt_id(file, "tokenizer.ggml.eos_token_id", n)?;
        let find_control = |text: &str| {
            pieces
                .iter()
                .zip(&types)
                .position(|(p, &t)| t == TokenType::Control && &p[..] == text.as_bytes())
                .map(|i| i as u32)
        };
        // llama.cpp guesses the end-of-turn token by its text when the file does not name it.
        let eot = match opt_id(file, "tokenizer.ggml.eot_token_id", n)? {
            Some(id) => Some(id),
            None => ["<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"]
                .iter()
                .find_map(|t| find_control(t)),
        };
        let add_bos = file
            .get("tokenizer.ggml.add_bos_token")
            .and_then(MetaValue::as_bool)
            .unwrap_or(false);
        let mut eog: Vec<u32> = [
            eos,
            eot,
            find_control("<|endoftext|>"),
            find_control("<|im_end|>"),
        ]
        .into_iter()
        .flatten()
        .collect();
        eog.sort_unstable();
        eog.dedup();

        let special_all = SpecialMatcher::new(&pieces, &types, |t| {
            matches!(t, TokenType::Control | TokenType::UserDefined)
        });
        let special_user = SpecialMatcher::new(&pieces, &types, |t| t == TokenType::UserDefined);
        Ok(Tokenizer {
            pieces,
            types,
            byte_ids,
            merges,
            pre,
            splitter: pre.compile(),
            nfc: true,
            special_all,
            special_user,
            bos,
            eos,
            eot,
            add_bos,
            eog,
        })
    }

    /// Whether input is normalised to NFC before splitting (default: on, as Qwen's
    /// `tokenizer.json` does). llama.cpp does not normalise, so on text that is not already NFC
    /// (e.g. `e` + U+0301) llama.cpp's ids differ from HF's; `with_nfc(false)` reproduces
    /// llama.cpp's. On NFC text (nearly all real text) both agree.
    pub fn with_nfc(mut self, on: bool) -> Tokenizer {
        self.nfc = on;
        self
    }

    /// See [`Tokenizer::with_nfc`].
    pub fn nfc(&self) -> bool {
        self.nfc
    }

    /// The pre-tokenizer (`tokenizer.ggml.pre`).
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// Number of tokens in the vocabulary; every id the tokenizer yields is below it.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// Number of merges that can apply (entries naming tokens absent from the vocabulary are
    /// dropped).
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// `tokenizer.ggml.eos_token_id`.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// `tokenizer.ggml.eot_token_id`, or the first control token named `<|im_end|>`,
    /// `<|eot_id|>`, `<|end|>` or `<end_of_turn>` (llama.cpp's guess) when the file names none.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// `tokenizer.ggml.add_bos_token` (false when absent, as for Qwen). [`Tokenizer::encode`]
    /// never adds BOS itself; callers that build prompts check this.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Tokens that end generation: EOS, EOT, and the control tokens `<|endoftext|>` and
    /// `<|im_end|>` when present. Sorted, no duplicates.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` ends generation (see [`Tokenizer::eog_ids`]).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The type of token `id`, `None` past the vocabulary.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// Whether `id` is a control (special) token such as `<|im_start|>`.
    pub fn is_control(&self, id: u32) -> bool {
        self.token_type(id) == Some(TokenType::Control)
    }

    /// The bytes token `id` stands for (a special token's text for special tokens). Empty for
    /// ids past the vocabulary. A piece need not be valid UTF-8: multi-byte characters are often
    /// split across tokens (see [`crate::StreamDecoder`]).
    pub fn token_piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], |p| p)
    }

    /// The id of the token whose bytes are exactly `piece`, if any (first match).
    pub fn token_id(&self, piece: &[u8]) -> Option<u32> {
        self.pieces
            .iter()
            .position(|p| &p[..] == piece)
            .map(|i| i as u32)
    }

    /// Concatenated pieces of `ids`, special tokens' text included; ids past the vocabulary
    /// contribute nothing. Use `String::from_utf8_lossy` for display.
    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.token_piece(id));
        }
        out
    }

    /// Token ids of `text`. With `parse_special`, the text of control tokens (`<|im_start|>`)
    /// becomes those tokens; without it they are tokenized as ordinary text. User-defined
    /// tokens are matched either way (as llama.cpp does). No BOS is added.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let special = if parse_special {
            &self.special_all
        } else {
            &self.special_user
        };
        let mut cache = Cache::default();
        let mut last = 0;
        if let Some(ac) = &special.ac {
            for m in ac.find_iter(text) {
                self.encode_plain(&text[last..m.start()], &mut cache, &mut out);
                out.push(special.ids[m.pattern().as_usize()]);
                last = m.end();
            }
        }
        self.encode_plain(&text[last..], &mut cache, &mut out);
        out
    }

    /// Token ids of arbitrary bytes: each byte that is not part of valid UTF-8 is read as
    /// U+FFFD, one per byte, as llama.cpp's `llama_tokenize` does; then as [`Tokenizer::encode`].
    pub fn encode_bytes(&self, bytes: &[u8], parse_special: bool) -> Vec<u32> {
        match std::str::from_utf8(bytes) {
            Ok(s) => self.encode(s, parse_special),
            Err(_) => self.encode(&replace_invalid_per_byte(bytes), parse_special),
        }
    }

    /// Encodes text that holds no special tokens.
    fn encode_plain(&self, text: &str, cache: &mut Cache, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let text: Cow<str> =
            if self.nfc && !text.is_ascii() && is_nfc_quick(text.chars()) != IsNormalized::Yes {
                Cow::Owned(nfc_by_line(text))
            } else {
                Cow::Borrowed(text)
            };
        let Cache {
            scratch,
            arena,
            words,
        } = cache;
        self.splitter.split(&text, |w| {
            if w.len() <= CACHE_MAX_WORD_BYTES {
                if let Some(&(s, l)) = words.get(w) {
                    out.extend_from_slice(&arena[s as usize..(s + l) as usize]);
                    return;
                }
                let start = out.len();
                merge_word(w.as_bytes(), &self.byte_ids, &self.merges, scratch, out);
                let s = arena.len() as u32;
                arena.extend_from_slice(&out[start..]);
                words.insert(w.into(), (s, (out.len() - start) as u32));
            } else {
                merge_word(w.as_bytes(), &self.byte_ids, &self.merges, scratch, out);
            }
        });
    }
}

/// Buffers reused across the stretches of one `encode` call.
#[derive(Default)]
struct Cache {
    scratch: Scratch,
    /// Ids of cached words, back to back.
    arena: Vec<u32>,
    /// Word -> its ids in `arena` (start, length); shared by all stretches of the call.
    words: FxHashMap<Box<str>, (u32, u32)>,
}

/// NFC of `text`, one line at a time: only the lines that may not be NFC are normalised. A line
/// feed has combining class 0 and is in no composition or decomposition, so nothing composes
/// across it and NFC(a + "\n" + b) = NFC(a) + "\n" + NFC(b).
fn nfc_by_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for line in text.split_inclusive('\n') {
        if line.is_ascii() || is_nfc_quick(line.chars()) == IsNormalized::Yes {
            out.push_str(line);
        } else {
            out.extend(line.nfc());
        }
    }
    out
}

/// `bytes` with each byte that is not part of a valid UTF-8 sequence replaced by U+FFFD.
fn replace_invalid_per_byte(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                return out;
            }
            Err(e) => {
                let (ok, rest) = bytes.split_at(e.valid_up_to());
                // `ok` is valid UTF-8 by construction.
                out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                out.push('\u{FFFD}');
                bytes = &rest[1..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfc_by_line_is_nfc() {
        for t in [
            "e\u{301}\nx",
            "a\n\u{301}b\n",
            "\n\u{301}",
            "ok\n\u{1100}\u{1161}\n\u{1161}",
            "\u{212B}\nA\u{30A}\r\nx\u{323}\u{307}",
            "",
        ] {
            let want: String = t.nfc().collect();
            assert_eq!(nfc_by_line(t), want, "{t:?}");
        }
    }

    #[test]
    fn invalid_bytes_become_one_replacement_each() {
        assert_eq!(
            replace_invalid_per_byte(b"a\xE2\x82b"),
            "a\u{FFFD}\u{FFFD}b"
        );
        assert_eq!(replace_invalid_per_byte(b"\xFF\xC3\xA9"), "\u{FFFD}é");
        assert_eq!(replace_invalid_per_byte(b"ok"), "ok");
    }
}
