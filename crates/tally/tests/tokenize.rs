//! `tally tokenize` end to end on the committed tiny vocab-only GGUF: ids and pieces in every
//! format, and the bad-input paths (exit code 2, a message that says what is wrong).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tally(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .output()
        .expect("run tally")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn vocab() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../text/tests/data/tiny.gguf")
}

fn assert_bad_input(o: &Output, text: &str) {
    assert_eq!(o.status.code(), Some(2), "exit code; stderr: {}", stderr(o));
    assert!(
        stderr(o).contains(text),
        "stderr lacks `{text}`: {}",
        stderr(o)
    );
}

#[test]
fn tokenize_prints_ids_and_pieces() {
    let v = vocab();
    let v = v.to_str().unwrap();
    let text = "<|im_start|>user\nHello, world! 中文<|im_end|>";
    let o = tally(&["tokenize", "--model", v, "--text", text, "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<u64> = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    assert_eq!(r["n_tokens"].as_u64().unwrap() as usize, ids.len());
    let tokens = r["tokens"].as_array().unwrap();
    assert_eq!(tokens[0]["piece"], "<|im_start|>");
    assert_eq!(tokens[0]["special"], true);
    assert_eq!(tokens.last().unwrap()["piece"], "<|im_end|>");
    // Pieces (with the exact bytes where a token holds part of a character) give the text back.
    let mut bytes = Vec::new();
    for t in tokens {
        match t.get("bytes") {
            Some(b) => bytes.extend(
                b.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u8),
            ),
            None => bytes.extend_from_slice(t["piece"].as_str().unwrap().as_bytes()),
        }
    }
    assert_eq!(String::from_utf8(bytes).unwrap(), text);

    // Without special tokens the markers are ordinary text: more tokens, none special.
    let o = tally(&[
        "tokenize",
        "--model",
        v,
        "--text",
        text,
        "--no-special",
        "-o",
        "json",
    ]);
    let r2: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(r2["n_tokens"].as_u64() > r["n_tokens"].as_u64());
    assert!(
        r2["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["special"] == false)
    );

    let o = tally(&["tokenize", "--model", v, "--text", "Hello"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\"Hello\"") || stdout(&o).contains("\"H"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("tokens from 5 bytes"), "{}", stdout(&o));
    let o = tally(&["tokenize", "--model", v, "--text", "Hello", "-o", "md"]);
    assert!(
        stdout(&o).starts_with("| # | id | piece |"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn tokenize_reads_files_and_invalid_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("in.txt");
    std::fs::write(&f, b"ok\xff\xfe").unwrap();
    let o = tally(&[
        "tokenize",
        "--model",
        vocab().to_str().unwrap(),
        "--file",
        f.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["input_bytes"], 4);
    // Each invalid byte reads as U+FFFD; a token may hold part of one (then `bytes` is exact).
    let mut bytes = Vec::new();
    for t in r["tokens"].as_array().unwrap() {
        match t.get("bytes") {
            Some(b) => bytes.extend(
                b.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u8),
            ),
            None => bytes.extend_from_slice(t["piece"].as_str().unwrap().as_bytes()),
        }
    }
    assert_eq!(String::from_utf8(bytes).unwrap(), "ok\u{FFFD}\u{FFFD}");
}

#[test]
fn tokenize_bad_input_exits_2() {
    let v = vocab();
    let v = v.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A model file without a vocabulary (a synthetic model has none).
    let model = dir.path().join("tiny.gguf");
    let o = tally(&[
        "synth",
        "--preset",
        "tiny",
        "--quant",
        "q8_0",
        "--out",
        model.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tally(&[
        "tokenize",
        "--model",
        model.to_str().unwrap(),
        "--text",
        "hi",
    ]);
    assert_bad_input(&o, "no vocabulary");
    // A missing model, a missing text file, a file that is not GGUF.
    let o = tally(&["tokenize", "--model", "/nonexistent/x.gguf", "--text", "hi"]);
    assert_bad_input(&o, "/nonexistent/x.gguf");
    let o = tally(&["tokenize", "--model", v, "--file", "/nonexistent/in.txt"]);
    assert_bad_input(&o, "cannot read --file /nonexistent/in.txt");
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let o = tally(&[
        "tokenize",
        "--model",
        junk.to_str().unwrap(),
        "--text",
        "hi",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Neither --text nor --file, or both: clap's usage errors (exit 2).
    let o = tally(&["tokenize", "--model", v]);
    assert_bad_input(&o, "--text");
    let o = tally(&["tokenize", "--model", v, "--text", "a", "--file", "b"]);
    assert_bad_input(&o, "cannot be used with");
    let o = tally(&["tokenize", "--help"]);
    assert!(
        stdout(&o).contains("tally tokenize --model"),
        "{}",
        stdout(&o)
    );
}
