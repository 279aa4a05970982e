//! The tokenizer against its oracles: HF tokenizers' ids (committed in tests/data/corpus.json by
//! tools/text/make_fixtures.py) on the tiny trained vocabulary and on llama.cpp's real Qwen3.5
//! vocab-only GGUF, and llama.cpp's own expected ids (`.inp`/`.out`) for that file and Qwen2's.

mod common;

use common::{corpus, data, llama_cases, llama_vocab, open};
use tally_gguf::GgufFile;
use tally_text::{PreTokenizer, StreamDecoder, TextError, TokenType, Tokenizer};
use unicode_normalization::UnicodeNormalization;

fn show(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&i| format!("{i}:{:?}", String::from_utf8_lossy(tok.token_piece(i))))
        .collect()
}

fn check_against(tok: &Tokenizer, text: &str, want: &[u32], what: &str) {
    let got = tok.encode(text, true);
    assert_eq!(
        got,
        want,
        "{what}: {text:?}\n got {:?}\nwant {:?}",
        show(tok, &got),
        show(tok, want)
    );
}

#[test]
fn tiny_vocab_matches_hf_on_the_corpus() {
    let tok = open(&data("tiny.gguf"));
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Qwen35);
    let c = corpus();
    assert!(c.cases.len() > 30);
    for case in &c.cases {
        check_against(&tok, &case.text, &case.tiny, "tiny vs HF");
    }
}

#[test]
fn decode_inverts_encode_up_to_nfc() {
    let tok = open(&data("tiny.gguf"));
    for case in &corpus().cases {
        let nfc: String = case.text.nfc().collect();
        for special in [true, false] {
            let ids = tok.encode(&case.text, special);
            assert_eq!(String::from_utf8(tok.decode(&ids)).unwrap(), nfc);
            assert!(ids.iter().all(|&i| (i as usize) < tok.vocab_size()));
            if !special {
                assert!(!ids.iter().any(|&i| tok.is_control(i)), "{:?}", case.text);
            }
        }
    }
}

#[test]
fn special_tokens_are_matched_only_when_asked() {
    let tok = open(&data("tiny.gguf"));
    let im_start = tok.token_id(b"<|im_start|>").unwrap();
    let think = tok.token_id(b"<think>").unwrap();
    assert_eq!(tok.token_type(im_start), Some(TokenType::Control));
    assert_eq!(tok.token_type(think), Some(TokenType::UserDefined));
    assert_eq!(tok.encode("<|im_start|>", true), [im_start]);
    assert!(tok.encode("<|im_start|>", false).len() > 1);
    // User-defined tokens are matched either way (as llama.cpp does).
    assert_eq!(tok.encode("<think>", false), [think]);
    assert_eq!(tok.eos(), tok.token_id(b"<|endoftext|>"));
    assert_eq!(tok.eot(), tok.token_id(b"<|im_end|>"));
    assert!(tok.is_eog(tok.eot().unwrap()) && tok.is_eog(tok.eos().unwrap()));
    assert!(!tok.is_eog(think));
}

#[test]
fn stream_decoder_never_splits_a_character() {
    let tok = open(&data("tiny.gguf"));
    let c = corpus();
    for case in &c.cases {
        let ids = tok.encode(&case.text, true);
        let mut d = StreamDecoder::new(&tok);
        let mut out = String::new();
        for &id in &ids {
            if let Some(s) = d.push(id) {
                out.push_str(&s);
            }
        }
        assert_eq!(d.flush(), None, "valid text leaves nothing held back");
        assert_eq!(out, String::from_utf8(tok.decode(&ids)).unwrap());
    }
    // The byte paths: invalid input comes back as U+FFFD, one per invalid byte.
    for b in &c.bytes {
        let ids = tok.encode_bytes(b, true);
        let text = String::from_utf8(tok.decode(&ids)).unwrap();
        let mut d = StreamDecoder::new(&tok);
        let mut out: String = ids.iter().filter_map(|&i| d.push(i)).collect();
        out.extend(d.flush());
        assert_eq!(out, text);
        assert!(text.contains('\u{FFFD}'), "{b:x?}");
    }
    // A character split across pushes comes out whole; a dangling lead byte at the end is
    // flushed as U+FFFD.
    let euro = "€".as_bytes();
    let ids: Vec<u32> = euro.iter().map(|b| tok.token_id(&[*b]).unwrap()).collect();
    let mut d = StreamDecoder::new(&tok);
    assert_eq!(d.push(ids[0]), None);
    assert_eq!(d.push(ids[1]), None);
    assert_eq!(d.push(ids[2]).as_deref(), Some("€"));
    assert_eq!(d.push(ids[0]), None);
    assert_eq!(d.flush().as_deref(), Some("\u{FFFD}"));
    let mut d = StreamDecoder::new(&tok).skip_control(true);
    assert_eq!(d.push(tok.eot().unwrap()), None);
}

#[test]
fn qwen35_vocab_matches_hf_on_the_corpus() {
    let Some(p) = llama_vocab("ggml-vocab-qwen35.gguf") else {
        return;
    };
    let tok = open(&p);
    assert_eq!(tok.vocab_size(), 151936);
    for case in &corpus().cases {
        let want = case.qwen35.as_ref().expect("corpus.json has qwen35 ids");
        check_against(&tok, &case.text, want, "qwen35 vs HF");
    }
}

#[test]
fn qwen35_and_qwen2_vocabs_match_llama_cpp_expected_files() {
    for name in ["ggml-vocab-qwen35.gguf", "ggml-vocab-qwen2.gguf"] {
        let Some(p) = llama_vocab(name) else {
            continue;
        };
        // llama.cpp does not normalise: its expected ids are for the text as given.
        let tok = open(&p).with_nfc(false);
        let cases = llama_cases(&p);
        assert!(cases.len() > 20);
        for (text, want) in &cases {
            check_against(&tok, text, want, name);
        }
    }
}

#[test]
fn files_without_a_usable_vocabulary_are_named_errors() {
    use tally_gguf::GgufWriter;
    let write = |kv: Vec<(&str, tally_gguf::MetaValue)>| {
        let mut buf = Vec::new();
        let kv: Vec<(String, tally_gguf::MetaValue)> =
            kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        GgufWriter::new(&mut buf, &kv, &[])
            .unwrap()
            .finish()
            .unwrap();
        GgufFile::from_bytes(buf, "test.gguf").unwrap()
    };
    use tally_gguf::MetaValue::String as S;
    let e = Tokenizer::from_gguf(&write(vec![])).unwrap_err();
    assert!(matches!(e, TextError::NoVocabulary { .. }), "{e}");
    assert!(e.to_string().contains("no vocabulary"), "{e}");
    let e =
        Tokenizer::from_gguf(&write(vec![("tokenizer.ggml.model", S("none".into()))])).unwrap_err();
    assert!(e.to_string().contains("no vocabulary"), "{e}");
    let toks = tally_gguf::MetaValue::Array(tally_gguf::MetaArray::String(vec!["a".into()]));
    let e = Tokenizer::from_gguf(&write(vec![
        ("tokenizer.ggml.model", S("llama".into())),
        ("tokenizer.ggml.tokens", toks.clone()),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("\"llama\" is not supported"), "{e}");
    let e = Tokenizer::from_gguf(&write(vec![
        ("tokenizer.ggml.model", S("gpt2".into())),
        ("tokenizer.ggml.pre", S("llama-bpe".into())),
        ("tokenizer.ggml.tokens", toks.clone()),
    ]))
    .unwrap_err();
    assert!(matches!(e, TextError::UnsupportedPre { .. }), "{e}");
    assert!(e.to_string().contains("llama-bpe"), "{e}");
    let e = Tokenizer::from_gguf(&write(vec![
        ("tokenizer.ggml.model", S("gpt2".into())),
        ("tokenizer.ggml.pre", S("qwen35".into())),
        ("tokenizer.ggml.tokens", toks),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("no token for byte"), "{e}");
}
