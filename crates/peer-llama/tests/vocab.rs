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
    for text in &texts {
        for special in [true, false] {
            let want = llama.tokenize(text.as_bytes(), special).unwrap();
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
    for id in 0..raw.vocab_size() as u32 {
        let want = llama.token_to_piece(id, true).unwrap();
        assert_eq!(raw.token_piece(id), &want[..], "{path:?} piece of {id}");
    }
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
