//! `tally serve` end to end on the tiny model with a real vocabulary: the openai client and curl
//! (tools/serve/e2e.py), a bounded load test, SIGTERM's graceful stop, and bad input.
//!
//! The vocabulary is the text crate's tiny BPE fixture (crates/text/tests/data/tiny.tokenizer.json,
//! made by tools/text/make_fixtures.py), written here as a vocab-only GGUF with a real Qwen3.5
//! chat template, and given to the server with --tokenizer.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tally_gguf::{GgufWriter, MetaArray, MetaValue};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tally(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .output()
        .expect("run tally")
}

/// The tiny tokenizer.json as a vocab-only GGUF, padded to `n_vocab` ids as converters pad
/// vocabularies to the model's logits.
fn write_vocab(path: &Path, n_vocab: usize) {
    let data = root().join("crates/text/tests/data");
    let j: Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("tiny.tokenizer.json")).expect("tokenizer.json"),
    )
    .expect("json");
    let mut tokens = vec![String::new(); n_vocab];
    let mut types = vec![5i32; n_vocab]; // unused
    for (piece, id) in j["model"]["vocab"].as_object().expect("vocab") {
        let id = id.as_u64().expect("id") as usize;
        tokens[id] = piece.clone();
        types[id] = 1; // normal
    }
    for a in j["added_tokens"].as_array().expect("added") {
        let id = a["id"].as_u64().expect("id") as usize;
        tokens[id] = a["content"].as_str().expect("content").to_string();
        types[id] = if a["special"] == true { 3 } else { 4 };
    }
    for (i, t) in tokens.iter_mut().enumerate() {
        if t.is_empty() {
            *t = format!("[PAD{i}]");
        }
    }
    let merges: Vec<String> = j["model"]["merges"]
        .as_array()
        .expect("merges")
        .iter()
        .map(|m| match m {
            Value::Array(p) => format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()),
            other => other.as_str().unwrap().to_string(),
        })
        .collect();
    let eos = tokens
        .iter()
        .position(|t| t == "<|endoftext|>")
        .expect("eos") as u32;
    let template =
        std::fs::read_to_string(data.join("templates/Qwen3.5-4B.jinja")).expect("template");
    let meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String("qwen35moe".into()),
        ),
        (
            "tokenizer.ggml.model".into(),
            MetaValue::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".into(),
            MetaValue::String("qwen35".into()),
        ),
        (
            "tokenizer.ggml.tokens".into(),
            MetaValue::Array(MetaArray::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            MetaValue::Array(MetaArray::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            MetaValue::Array(MetaArray::String(merges)),
        ),
        ("tokenizer.ggml.eos_token_id".into(), MetaValue::U32(eos)),
        (
            "tokenizer.chat_template".into(),
            MetaValue::String(template),
        ),
    ];
    let f = std::fs::File::create(path).expect("create vocab");
    GgufWriter::new(f, &meta, &[])
        .expect("writer")
        .finish()
        .expect("finish");
}

fn fixtures(dir: &Path) -> (PathBuf, PathBuf) {
    let model = dir.join("tiny.gguf");
    let o = tally(&[
        "synth",
        "--preset",
        "tiny",
        "--quant",
        "q8_0",
        "--seed",
        "1",
        "--out",
        &model.to_string_lossy(),
    ]);
    assert!(
        o.status.success(),
        "synth: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let vocab = dir.join("vocab.gguf");
    write_vocab(&vocab, 512);
    (model, vocab)
}

#[test]
fn serve_on_the_tiny_model_with_real_clients() {
    let Some(py) = tally_serve::fake::e2e_python() else {
        eprintln!("skipped: no Python with the openai package (set TALLY_E2E_PYTHON)");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, vocab) = fixtures(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["serve", "--model", &model.to_string_lossy(), "--tokenizer"])
        .arg(&vocab)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--ctx",
            "2048",
            "--alias",
            "tiny",
        ])
        .args(["--queue", "16", "-t", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tally serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut addr = None;
    let mut banner = String::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        banner.push_str(&line);
        banner.push('\n');
        if let Some(a) = line.strip_prefix("listening on ") {
            addr = Some(a.to_string());
        }
        if line.starts_with("try: curl") {
            break;
        }
    }
    let Some(base) = addr else {
        let _ = child.kill();
        panic!("no listening address in:\n{banner}");
    };
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    // Keep draining stdout so the server never blocks on a full pipe.
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let seconds = std::env::var("TALLY_E2E_SECONDS").unwrap_or_else(|_| "20".into());
    let summary = root().join("target/serve-e2e/tiny-cpu-load.json");
    std::fs::create_dir_all(summary.parent().unwrap()).unwrap();
    let out = Command::new(py)
        .arg(root().join("tools/serve/e2e.py"))
        .args(["--base-url", &base, "--model", "tiny", "--streams", "8"])
        .args([
            "--seconds",
            &seconds,
            "--summary",
            &summary.to_string_lossy(),
        ])
        .output()
        .expect("run e2e.py");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");

    // SIGTERM: the server stops by itself, cleanly.
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest = drain.join().unwrap_or_default();
    assert!(
        out.status.success(),
        "e2e.py failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = status.expect("tally serve did not stop within 20 s of SIGTERM");
    assert!(status.success(), "exit after SIGTERM: {status}");
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

fn assert_bad_input(o: &std::process::Output, text: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "exit code; stderr: {err}");
    assert!(err.contains(text), "stderr lacks `{text}`: {err}");
}

#[test]
fn serve_bad_input_is_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, vocab) = fixtures(dir.path());
    let (m, v) = (model.to_string_lossy(), vocab.to_string_lossy());
    let missing = dir.path().join("missing.gguf");
    assert_bad_input(
        &tally(&["serve", "--model", &missing.to_string_lossy()]),
        "missing.gguf",
    );
    // The synthetic model carries no vocabulary.
    assert_bad_input(
        &tally(&["serve", "--model", &m, "--port", "0"]),
        "vocabulary",
    );
    assert_bad_input(
        &tally(&[
            "serve",
            "--model",
            &m,
            "--tokenizer",
            &v,
            "--host",
            "localhost!",
        ]),
        "--host",
    );
    assert_bad_input(
        &tally(&["serve", "--model", &m, "--tokenizer", &v, "--queue", "0"]),
        "--queue",
    );
    let t = dir.path().join("missing.jinja");
    let o = tally(&[
        "serve",
        "--model",
        &m,
        "--tokenizer",
        &v,
        "--template",
        &t.to_string_lossy(),
    ]);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn serve_help_has_an_example() {
    let o = tally(&["serve", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(out.contains("Example:") && out.contains("curl"), "{out}");
}
