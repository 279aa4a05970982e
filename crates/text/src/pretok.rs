//! Pre-tokenizers: how text is cut into words before BPE runs inside each word.
//!
//! Qwen's `tokenizer.json` states its split as one regular expression with a look-ahead
//! (`\s+(?!\S)`), which the linear-time `regex` crate does not have. The look-ahead only changes
//! one case, and that case is easy to state exactly: a run of whitespace with no line break,
//! followed by a non-space character, gives all but its last character (which then leads the next
//! word, e.g. the space of " world"). So the pattern below ends in plain `\s+` and
//! [`PreTokenizer::split`] gives back that last character afterwards. Everything else, the
//! leftmost-first choice between alternatives included, is the `regex` crate's own semantics,
//! which are Perl's (and Oniguruma's, which HF tokenizers uses).

use regex::Regex;

/// The pre-tokenizer named by `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `qwen35`: Qwen3.5/3.6. Letter runs also take combining marks (`[\p{L}\p{M}]+`).
    Qwen35,
    /// `qwen2` (and `deepseek-r1-qwen`): Qwen2/2.5/3. Letter runs are `\p{L}+`.
    Qwen2,
}

/// Qwen3.5's split, without the look-ahead (see the module comment). Alternatives, in order:
/// English contractions, a letter run with one optional leading non-letter, one digit, a
/// punctuation run with an optional leading space and trailing line breaks, whitespace ending in
/// line breaks, other whitespace.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";
/// Qwen2's split (the same with `\p{L}+` letter runs and marks counted as punctuation).
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value, if tally implements it.
    pub fn from_gguf_name(name: &str) -> Option<PreTokenizer> {
        match name {
            "qwen35" => Some(PreTokenizer::Qwen35),
            "qwen2" | "deepseek-r1-qwen" => Some(PreTokenizer::Qwen2),
            _ => None,
        }
    }

    /// The regular expression as HF tokenizers writes it (with the look-ahead), for
    /// `tokenizer.json` files and documentation.
    pub fn hf_pattern(self) -> &'static str {
        match self {
            PreTokenizer::Qwen35 => {
                r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            }
            PreTokenizer::Qwen2 => {
                r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            }
        }
    }

    pub(crate) fn compile(self) -> Splitter {
        let pattern = match self {
            PreTokenizer::Qwen35 => QWEN35,
            PreTokenizer::Qwen2 => QWEN2,
        };
        // The patterns are constants; the unit test below compiles both.
        let re = Regex::new(pattern).unwrap_or_else(|e| unreachable!("constant pattern: {e}"));
        Splitter { re }
    }
}

/// A compiled pre-tokenizer (shareable across threads: `Regex` keeps per-thread search caches).
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    re: Regex,
}

impl Splitter {
    /// Calls `f` with each word of `text`, in order; the words cover `text` exactly.
    pub(crate) fn split<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) {
        let mut pos = 0;
        while pos < text.len() {
            let Some(m) = self.re.find_at(text, pos) else {
                f(&text[pos..]);
                return;
            };
            if m.start() > pos {
                // Every character matches some alternative, so this does not happen; if it did,
                // the gap is still a word of its own (as llama.cpp does).
                f(&text[pos..m.start()]);
            }
            let mut end = m.end();
            let word = m.as_str();
            if end < text.len() && is_plain_space_run(word) {
                // `\s+(?!\S)`: the run is followed by a non-space, so it keeps all but its last
                // character, which begins the next word.
                if let Some(last) = word.chars().next_back()
                    && last.len_utf8() < word.len()
                {
                    end -= last.len_utf8();
                }
            }
            f(&text[m.start()..end]);
            pos = end;
        }
    }
}

/// Whitespace only and not ending in a line break: a match of the last alternative (`\s+`);
/// matches of `\s*[\r\n]+` end in a line break, and every other alternative holds a non-space.
fn is_plain_space_run(word: &str) -> bool {
    !word.ends_with(['\r', '\n']) && word.chars().all(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: PreTokenizer, s: &str) -> Vec<String> {
        let sp = p.compile();
        let mut out = Vec::new();
        sp.split(s, |w| out.push(w.to_string()));
        assert_eq!(out.concat(), s, "words must cover the text");
        out
    }

    #[test]
    fn splits_like_the_lookahead_pattern() {
        let p = PreTokenizer::Qwen35;
        assert_eq!(words(p, "Hello world"), ["Hello", " world"]);
        assert_eq!(words(p, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(p, "a \tb"), ["a", " ", "\tb"]);
        assert_eq!(words(p, "a  "), ["a", "  "]);
        assert_eq!(words(p, "x \n\n y"), ["x", " \n\n", " y"]);
        assert_eq!(words(p, "1234"), ["1", "2", "3", "4"]);
        assert_eq!(words(p, "I'm DON'T"), ["I", "'m", " DON", "'T"]);
        assert_eq!(words(p, "f(x);\n"), ["f", "(", "x", ");\n"]);
        assert_eq!(words(p, " !!x"), [" !!", "x"]);
    }

    #[test]
    fn marks_join_letters_only_in_qwen35() {
        // U+0301 COMBINING ACUTE after a digit: a mark run in qwen35, punctuation in qwen2.
        assert_eq!(words(PreTokenizer::Qwen35, "1\u{301}a"), ["1", "\u{301}a"]);
        assert_eq!(words(PreTokenizer::Qwen2, "1\u{301}a"), ["1", "\u{301}a"]);
        // Khmer: consonants (Lo) with dependent vowel signs (Mc/Mn) stay one word in qwen35.
        assert_eq!(words(PreTokenizer::Qwen35, "ខ្មែរ"), ["ខ្មែរ"]);
        assert!(words(PreTokenizer::Qwen2, "ខ្មែរ").len() > 1);
    }
}
