//! tally's tokenizer against llama.cpp's on the same files: `llama_tokenize` and
//! `llama_token_to_piece` through the peer, on the committed tiny vocabulary and on llama.cpp's
//! real Qwen3.5 / Qwen2 vocab-only GGUFs (skipped, saying so, when they are not on the machine:
//! scripts/setup-llama-vocab.sh fetches them). Identical ids on the whole corpus.

#[path = "../../text/tests/common/mod.rs"]
mod common;

use std::path::Path;

use tally_peer_llama::LlamaVocab;
use tally_text::Tokenizer;
use unicode_normalization::is_nfc;

fn compare(path: &Path, extra: &[(String, Vec<u32>)]) {
    let llama = LlamaVocab::open(path).unwrap();
    // llama.cpp does not normalise to NFC; tally can be told not to either.
    let raw = common::open(path).with_nfc(false);
    let nfc: Tokenizer = common::open(path);
    assert_eq!(llama.n_vocab() as usize, raw.vocab_size());
    let c = common::corpus();
    let texts: Vec<&str> = c
        .cases
        .iter()
        .map(|c| c.text.as_str())
        .chain(extra.iter().map(|(t, _)| t.as_str()))
        .collect();
    let mut n_differ_nfc = 0;
    let mut n_ids = 0usize;
    for text in &texts {
        for special in [true, false] {
            let want = llama.tokenize(text.as_bytes(), special).unwrap();
            n_ids += want.len();
            assert_eq!(
                raw.encode(text, special),
                want,
                "{path:?} {text:?} special={special}"
            );
            if is_nfc(text) {
                assert_eq!(
                    nfc.encode(text, special),
                    want,
                    "{path:?} {text:?} (NFC text)"
                );
            } else if nfc.encode(text, special) != want {
                n_differ_nfc += 1;
            }
        }
    }
    // The corpus holds text that is not NFC, where Qwen's own tokenizer (HF) and llama.cpp part.
    assert!(
        n_differ_nfc > 0,
        "the corpus should show the NFC difference"
    );
    for b in &c.bytes {
        for special in [true, false] {
            let want = llama.tokenize(b, special).unwrap();
            assert_eq!(raw.encode_bytes(b, special), want, "{path:?} bytes {b:x?}");
        }
    }
    // Random strings over characters of every class the split looks at (the pre-tokenizer's
    // alternatives, white space of every kind, marks, contractions, emoji and ZWJ).
    let mut pool: Vec<char> = "aZé中ſSsTtRrEeVvMmLlDd'' \t\n\r\u{301}\u{94D}\u{17B6}09٣½Ⅻ.,;!?()-_\"#😀\u{200D}\u{FE0F}🏽ខ្មែរя한ひ"
        .chars()
        .collect();
    pool.extend(
        (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| c.is_whitespace()),
    );
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let n_random = 3000;
    for _ in 0..n_random {
        let len = 1 + (next() % 24) as usize;
        let text: String = (0..len)
            .map(|_| pool[(next() % pool.len() as u64) as usize])
            .collect();
        let want = llama.tokenize(text.as_bytes(), false).unwrap();
        n_ids += want.len();
        assert_eq!(raw.encode(&text, false), want, "{path:?} random {text:?}");
    }
    for id in 0..raw.vocab_size() as u32 {
        let want = llama.token_to_piece(id, true).unwrap();
        assert_eq!(raw.token_piece(id), &want[..], "{path:?} piece of {id}");
    }
    eprintln!(
        "{}: identical ids on {} texts x 2 (parse_special on and off) and {n_random} random strings, \
         {n_ids} ids in all; {} invalid-UTF-8 byte strings; {} token pieces; NFC (tally's default) \
         differs from llama.cpp on {n_differ_nfc} of the non-NFC encodes, as expected",
        path.file_name().map_or("?".into(), |f| f.to_string_lossy()),
        texts.len(),
        c.bytes.len(),
        raw.vocab_size(),
    );
}

#[test]
fn tiny_vocab_matches_llama_cpp() {
    compare(&common::data("tiny.gguf"), &[]);
}

#[test]
fn real_qwen_vocabs_match_llama_cpp() {
    for name in ["ggml-vocab-qwen35.gguf", "ggml-vocab-qwen2.gguf"] {
        if let Some(p) = common::llama_vocab(name) {
            let cases = common::llama_cases(&p);
            compare(&p, &cases);
        }
    }
}
