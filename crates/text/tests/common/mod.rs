//! Shared by the tokenizer tests: fixtures, the corpus, and where llama.cpp's vocab-only GGUFs
//! are found.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tally_gguf::GgufFile;
use tally_text::Tokenizer;

/// A file of crates/text/tests/data. This module is also included by crates/peer-llama's tests
/// (`#[path]`), where `CARGO_MANIFEST_DIR` is that crate's: the path goes through the sibling
/// `text` folder so it is the same from both.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../text/tests/data")
        .join(name)
}

pub fn open(path: &Path) -> Tokenizer {
    let f = GgufFile::open(path).unwrap();
    Tokenizer::from_gguf(&f).unwrap()
}

pub struct Case {
    pub text: String,
    pub tiny: Vec<u32>,
    pub qwen35: Option<Vec<u32>>,
}

pub struct Corpus {
    pub cases: Vec<Case>,
    pub bytes: Vec<Vec<u8>>,
}

pub fn corpus() -> Corpus {
    let s = std::fs::read_to_string(data("corpus.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let ids = |x: &serde_json::Value| -> Vec<u32> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    };
    let cases = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            tiny: ids(&c["tiny"]),
            qwen35: c.get("qwen35").map(ids),
        })
        .collect();
    let bytes = v["bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let h = h.as_str().unwrap();
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect();
    Corpus { cases, bytes }
}

/// The folder holding llama.cpp's `ggml-vocab-*.gguf` files: `$TALLY_LLAMA_VOCAB_DIR`, else the
/// copy scripts/setup-llama-vocab.sh keeps in the user's cache, else the unpacked sdist of the
/// development machines. `None` (and a printed reason) when none has them.
pub fn llama_vocab(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(d) = std::env::var("TALLY_LLAMA_VOCAB_DIR") {
        dirs.push(d.into());
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".cache")));
    if let Ok(c) = cache {
        dirs.push(c.join("tally/llama-vocab"));
    }
    dirs.push("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp/models".into());
    for d in &dirs {
        let p = d.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    eprintln!(
        "skipped: {name} not found in {dirs:?} (run scripts/setup-llama-vocab.sh or set TALLY_LLAMA_VOCAB_DIR)"
    );
    None
}

/// llama.cpp's test-tokenizer-0 files beside a vocab: `<vocab>.inp` holds the texts, each
/// followed by `\n__ggml_vocab_test__\n`; `<vocab>.out` one line of ids per text.
pub fn llama_cases(vocab: &Path) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(vocab.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(vocab.with_extension("gguf.out")).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""), "the .inp file ends with a separator");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len());
    texts.into_iter().map(str::to_string).zip(ids).collect()
}
