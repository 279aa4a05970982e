//! Pre-tokenizers: how text is cut into words before BPE runs inside each word.
//!
//! Qwen's `tokenizer.json` states its split as one regular expression (see
//! [`PreTokenizer::hf_pattern`]). Every character matches one of its alternatives, so each word
//! starts where the previous one ended, and the split is a scan that, at each position, takes
//! the first alternative that matches there (leftmost-first, as Perl, Oniguruma, which HF
//! tokenizers uses, and the `regex` crate all choose). [`Splitter`] does that scan by hand over
//! a table of character classes (letters `\p{L}`, marks `\p{M}`, numbers `\p{N}`, white space
//! `\s`) taken from `regex-syntax`'s Unicode tables, the ones the `regex` crate matches with.
//! A lazy DFA over those classes rebuilt its states again and again on CJK and mixed-script
//! text (1.9 MB/s, 40% of the time in determinisation); the scan costs one table lookup per
//! character. The tests hold it to the `regex` crate on the pattern itself: every code point,
//! and random strings over the characters each alternative turns on.
//!
//! The alternatives (qwen35; qwen2 differs where noted):
//! 1. `(?i:'s|'t|'re|'ve|'m|'ll|'d)`, English contractions;
//! 2. `[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+`, a letter run with one optional leading non-letter
//!    (qwen2: `\p{L}+`, marks are punctuation);
//! 3. `\p{N}`, one digit;
//! 4. ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`, a punctuation run with an optional leading space and
//!    trailing line breaks (qwen2: `[^\s\p{L}\p{N}]+`);
//! 5. `\s*[\r\n]+`, white space ending in line breaks;
//! 6. `\s+(?!\S)|\s+`, other white space. The look-ahead only changes one case: a run of white
//!    space with no line break, followed by a non-space character, gives all but its last
//!    character (which then leads the next word, e.g. the space of " world").

use std::sync::OnceLock;

/// The pre-tokenizer named by `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `qwen35`: Qwen3.5/3.6. Letter runs also take combining marks (`[\p{L}\p{M}]+`).
    Qwen35,
    /// `qwen2` (and `deepseek-r1-qwen`): Qwen2/2.5/3. Letter runs are `\p{L}+`.
    Qwen2,
}

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
        let (word, punct_not) = match self {
            PreTokenizer::Qwen35 => (L | M, S | L | M | N),
            PreTokenizer::Qwen2 => (L, S | L | N),
        };
        Splitter {
            classes: Classes::get(),
            word,
            punct_not,
        }
    }
}

/// Class bits: letter, mark, number, white space (general categories L, M, N are disjoint, and
/// White_Space characters are separators or controls, so a character has at most one bit).
const L: u8 = 1;
const M: u8 = 2;
const N: u8 = 4;
const S: u8 = 8;

/// The class of every code point: a flat table below U+10000, sorted ranges above.
struct Classes {
    bmp: Box<[u8]>,
    /// `(first, last, class)`, sorted, disjoint.
    astral: Box<[(u32, u32, u8)]>,
}

impl std::fmt::Debug for Classes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classes")
            .field("astral_ranges", &self.astral.len())
            .finish_non_exhaustive()
    }
}

impl Classes {
    fn get() -> &'static Classes {
        static CLASSES: OnceLock<Classes> = OnceLock::new();
        CLASSES.get_or_init(Classes::build)
    }

    fn build() -> Classes {
        let mut bmp = vec![0u8; 0x1_0000].into_boxed_slice();
        let mut astral = Vec::new();
        for (bit, pattern) in [(L, r"\p{L}"), (M, r"\p{M}"), (N, r"\p{N}"), (S, r"\s")] {
            for (lo, hi) in unicode_ranges(pattern) {
                for cp in lo..=hi.min(0xFFFF) {
                    bmp[cp as usize] |= bit;
                }
                if hi > 0xFFFF {
                    astral.push((lo.max(0x1_0000), hi, bit));
                }
            }
        }
        astral.sort_unstable();
        Classes {
            bmp,
            astral: astral.into_boxed_slice(),
        }
    }

    #[inline]
    fn of(&self, c: char) -> u8 {
        let cp = c as u32;
        if cp < 0x1_0000 {
            return self.bmp[cp as usize];
        }
        match self.astral.binary_search_by(|&(lo, hi, _)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        }) {
            Ok(i) => self.astral[i].2,
            Err(_) => 0,
        }
    }
}

/// The code point ranges of a one-class pattern, from `regex-syntax`'s tables.
fn unicode_ranges(pattern: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    // The patterns are constants; the unit tests build every table.
    let hir = regex_syntax::parse(pattern).unwrap_or_else(|e| unreachable!("{pattern}: {e}"));
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        k => unreachable!("{pattern} is not one Unicode class: {k:?}"),
    }
}

/// A compiled pre-tokenizer (shareable across threads; the class table is built once per
/// process).
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    classes: &'static Classes,
    /// Classes of alternative 2's run.
    word: u8,
    /// Classes alternative 4's run excludes.
    punct_not: u8,
}

/// The character at byte `i` of `text` and its length, `None` at the end.
#[inline]
fn char_at(text: &str, i: usize) -> Option<(char, usize)> {
    text.get(i..)?.chars().next().map(|c| (c, c.len_utf8()))
}

/// Alternative 1 after the apostrophe: the contraction's byte length, if `rest` starts with one
/// (case-insensitive: `regex`'s simple case folding also puts U+017F LATIN SMALL LETTER LONG S
/// with `s`).
fn contraction(rest: &str) -> Option<usize> {
    let mut it = rest.chars();
    let c1 = it.next()?;
    match c1 {
        's' | 'S' | 't' | 'T' | 'm' | 'M' | 'd' | 'D' => return Some(1),
        '\u{17F}' => return Some(2),
        _ => {}
    }
    let c2 = it.next()?;
    match (c1.to_ascii_lowercase(), c2) {
        ('r' | 'v', 'e' | 'E') | ('l', 'l' | 'L') => Some(2),
        _ => None,
    }
}

impl Splitter {
    #[inline]
    fn class(&self, c: char) -> u8 {
        if c.is_ascii() {
            ASCII[c as usize]
        } else {
            self.classes.of(c)
        }
    }

    /// End of the run of characters in `classes` from byte `i`.
    #[inline]
    fn run(&self, text: &str, mut i: usize, classes: u8) -> usize {
        while let Some((c, n)) = char_at(text, i) {
            if self.class(c) & classes == 0 {
                break;
            }
            i += n;
        }
        i
    }

    /// End of the punctuation run from byte `i`.
    #[inline]
    fn punct_run(&self, text: &str, mut i: usize) -> usize {
        while let Some((c, n)) = char_at(text, i) {
            if self.class(c) & self.punct_not != 0 {
                break;
            }
            i += n;
        }
        i
    }

    /// End of the word that starts at byte `pos` (before the look-ahead), `pos < text.len()`.
    fn word_end(&self, text: &str, pos: usize) -> usize {
        let Some((c0, n0)) = char_at(text, pos) else {
            return text.len();
        };
        let k0 = self.class(c0);
        // 1. contractions
        if c0 == '\''
            && let Some(n) = contraction(&text[pos + 1..])
        {
            return pos + 1 + n;
        }
        // 2. [^\r\n\p{L}\p{N}]?[word]+: with c0 in the run, taking c0 as the optional character or
        // not ends at the same place.
        if k0 & self.word != 0 {
            return self.run(text, pos, self.word);
        }
        if c0 != '\r'
            && c0 != '\n'
            && k0 & (L | N) == 0
            && let Some((c1, _)) = char_at(text, pos + n0)
            && self.class(c1) & self.word != 0
        {
            return self.run(text, pos + n0, self.word);
        }
        // 3. one digit
        if k0 & N != 0 {
            return pos + n0;
        }
        // 4. ` ?[punct]+[\r\n]*`
        let start = if c0 == ' ' { pos + 1 } else { pos };
        if let Some((c, _)) = char_at(text, start)
            && self.class(c) & self.punct_not == 0
        {
            let mut i = self.punct_run(text, start);
            while let Some(b'\r' | b'\n') = text.as_bytes().get(i) {
                i += 1;
            }
            return i;
        }
        // Only white space is left (every other character is a letter, mark, number or
        // punctuation, and those matched above).
        let end = self.run(text, pos, S);
        if end == pos {
            // Unreachable by the classes' construction; a character of its own, as llama.cpp
            // treats text no alternative matches.
            return pos + n0;
        }
        // 5. `\s*[\r\n]+`: the greedy `\s*` gives back up to the run's last line break.
        let run = &text.as_bytes()[pos..end];
        if let Some(last) = run.iter().rposition(|&b| b == b'\r' || b == b'\n') {
            return pos + last + 1;
        }
        // 6. `\s+`
        end
    }

    /// Calls `f` with each word of `text`, in order; the words cover `text` exactly.
    pub(crate) fn split<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) {
        let mut pos = 0;
        while pos < text.len() {
            let mut end = self.word_end(text, pos);
            let word = &text[pos..end];
            if end < text.len() && is_plain_space_run(word) {
                // `\s+(?!\S)`: the run is followed by a non-space, so it keeps all but its last
                // character, which begins the next word.
                if let Some(last) = word.chars().next_back()
                    && last.len_utf8() < word.len()
                {
                    end -= last.len_utf8();
                }
            }
            f(&text[pos..end]);
            pos = end;
        }
    }
}

/// Classes of the ASCII characters (the same as the tables give; a unit test checks).
const ASCII: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = if b.is_ascii_alphabetic() {
            L
        } else if b.is_ascii_digit() {
            N
        } else if matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r') {
            S
        } else {
            0
        };
        c += 1;
    }
    t
};

/// White space only and not ending in a line break: a match of the last alternative (`\s+`);
/// matches of `\s*[\r\n]+` end in a line break, and every other alternative holds a non-space.
fn is_plain_space_run(word: &str) -> bool {
    !word.ends_with(['\r', '\n']) && word.chars().all(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    fn words(p: PreTokenizer, s: &str) -> Vec<String> {
        let sp = p.compile();
        let mut out = Vec::new();
        sp.split(s, |w| out.push(w.to_string()));
        assert_eq!(out.concat(), s, "words must cover the text");
        out
    }

    /// The oracle: the `regex` crate on the pattern without its look-ahead (`\s+(?!\S)` is
    /// done afterwards, as `split` does), searched from each word's end.
    struct Oracle(Regex);

    impl Oracle {
        fn new(p: PreTokenizer) -> Oracle {
            let pattern = p.hf_pattern().replace(r"|\s+(?!\S)", "");
            Oracle(Regex::new(&pattern).unwrap())
        }

        fn words(&self, s: &str) -> Vec<String> {
            let mut out = Vec::new();
            let mut pos = 0;
            while pos < s.len() {
                let m = self.0.find_at(s, pos).unwrap();
                assert_eq!(m.start(), pos, "every character matches: {s:?}");
                let mut end = m.end();
                let w = m.as_str();
                if end < s.len() && is_plain_space_run(w) {
                    let last = w.chars().next_back().unwrap();
                    if last.len_utf8() < w.len() {
                        end -= last.len_utf8();
                    }
                }
                out.push(s[pos..end].to_string());
                pos = end;
            }
            out
        }
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
        assert_eq!(words(p, "f(x);\n"), ["f", "(x", ");\n"]);
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

    #[test]
    fn class_table_agrees_with_regex_on_every_code_point() {
        let sp = PreTokenizer::Qwen35.compile();
        let res = [
            (L, r"^\p{L}$"),
            (M, r"^\p{M}$"),
            (N, r"^\p{N}$"),
            (S, r"^\s$"),
        ]
        .map(|(b, p)| (b, Regex::new(p).unwrap()));
        let mut buf = [0u8; 4];
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let s = c.encode_utf8(&mut buf);
            let want = res
                .iter()
                .filter(|(_, re)| re.is_match(s))
                .fold(0, |a, (b, _)| a | b);
            assert_eq!(sp.class(c), want, "U+{:04X}", c as u32);
            assert_eq!(sp.classes.of(c), want, "U+{:04X} (table)", c as u32);
        }
    }

    /// Every code point, each next to a rotating neighbour (letter, mark, digit, space, line
    /// break, apostrophe, punctuation, Cyrillic letter), against the oracle. The classes are
    /// the regex's (the test above), so this holds the grammar on every class.
    #[test]
    fn every_code_point_splits_as_the_regex_does() {
        for p in [PreTokenizer::Qwen35, PreTokenizer::Qwen2] {
            let oracle = Oracle::new(p);
            let mut s = String::new();
            for (i, c) in (0..=0x10FFFFu32).filter_map(char::from_u32).enumerate() {
                s.push(c);
                s.push(['a', '\u{301}', '1', ' ', '\n', '\'', '.', 'я'][i % 8]);
                if s.len() > 8192 {
                    assert_eq!(words(p, &s), oracle.words(&s), "{p:?}");
                    s.clear();
                }
            }
            assert_eq!(words(p, &s), oracle.words(&s), "{p:?}");
        }
    }

    /// The contractions are the one place single characters, not classes, decide: every code
    /// point after the apostrophe and after each contraction's first letter, against the
    /// regex's case-insensitive alternatives.
    #[test]
    fn contractions_fold_case_as_the_regex_does() {
        let re = Regex::new(r"^(?i:'s|'t|'re|'ve|'m|'ll|'d)").unwrap();
        let mut s = String::new();
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            for (before, after) in [
                ("'", ""),
                ("'", "e"),
                ("'", "E"),
                ("'", "l"),
                ("'", "L"),
                ("'r", ""),
                ("'R", ""),
                ("'v", ""),
                ("'V", ""),
                ("'l", ""),
                ("'L", ""),
            ] {
                s.clear();
                s.push_str(before);
                s.push(c);
                s.push_str(after);
                let want = re.find(&s).map(|m| m.end() - 1);
                assert_eq!(contraction(&s[1..]), want, "{s:?}");
            }
        }
    }

    /// Random strings over the characters every alternative turns on (every White_Space
    /// character among them), one by one (text ends matter to the look-ahead) and joined.
    #[test]
    fn random_text_splits_as_the_regex_does() {
        let mut pool: Vec<char> = "aZé中ſSsTtRrEeVvMmLlDdkK'' \t\n\r\u{301}\u{94D}\u{17B6}09٣½Ⅻ.,;!?()-_\"'#😀\u{200D}\u{FE0F}🏽ខ្មែរ"
            .chars()
            .collect();
        pool.extend(
            (0..=0x10FFFFu32)
                .filter_map(char::from_u32)
                .filter(|c| c.is_whitespace()),
        );
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for p in [PreTokenizer::Qwen35, PreTokenizer::Qwen2] {
            let oracle = Oracle::new(p);
            let mut joined = String::new();
            for _ in 0..20_000 {
                let len = 1 + (next() % 16) as usize;
                let s: String = (0..len)
                    .map(|_| pool[(next() % pool.len() as u64) as usize])
                    .collect();
                assert_eq!(words(p, &s), oracle.words(&s), "{p:?} {s:?}");
                joined.push_str(&s);
            }
            assert_eq!(words(p, &joined), oracle.words(&joined), "{p:?}");
        }
    }
}
