//! `tally generate` and `tally chat` end to end on the tiny synthetic model (random weights, so
//! the text is gibberish) with a real byte-level BPE vocabulary: tests/fixtures/tiny-vocab.gguf,
//! the 427-token vocab-only GGUF written by tools/text/make_fixtures.py (a copy of the text
//! crate's `tiny.gguf`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const VOCAB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tiny-vocab.gguf"
);
const TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../text/tests/data/templates/Qwen3.5-4B.jinja"
);

fn tally(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .output()
        .expect("run tally")
}

fn tally_stdin(args: &[&str], input: &str) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tally");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    c.wait_with_output().expect("wait")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn synth(dir: &Path, vocab: usize) -> PathBuf {
    let p = dir.join(format!("tiny-{vocab}.gguf"));
    let o = tally(&[
        "synth",
        "--preset",
        "tiny",
        "--quant",
        "q8_0",
        "--seed",
        "3",
        "--set",
        &format!("vocab={vocab}"),
        "--out",
        &p.to_string_lossy(),
    ]);
    assert!(o.status.success(), "synth: {}", err(&o));
    p
}

fn generate_json(model: &Path, extra: &[&str]) -> serde_json::Value {
    let m = model.to_string_lossy();
    let mut args = vec![
        "generate",
        "--model",
        &m,
        "--tokenizer",
        VOCAB,
        "--prompt",
        "The quick brown fox",
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let o = tally(&args);
    assert!(o.status.success(), "generate: {}", err(&o));
    serde_json::from_slice(&o.stdout).expect("json report")
}

fn tokens(v: &serde_json::Value) -> Vec<u64> {
    v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("id"))
        .collect()
}

#[test]
fn generate_streams_text_and_reports_speeds() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), 427);
    let greedy = generate_json(&model, &["--temp", "0", "-n", "12", "--ignore-eos"]);
    assert_eq!(tokens(&greedy).len(), 12);
    assert_eq!(greedy["finish"], "length");
    assert!(greedy["prompt_tokens"].as_u64().unwrap() >= 3);
    assert!(greedy["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    // Greedy is deterministic; the text mode streams the same text, speeds on stderr.
    assert_eq!(
        tokens(&generate_json(
            &model,
            &["--temp", "0", "-n", "12", "--ignore-eos"]
        )),
        tokens(&greedy)
    );
    let m = model.to_string_lossy();
    let o = tally(&[
        "generate",
        "--model",
        &m,
        "--tokenizer",
        VOCAB,
        "--prompt",
        "The quick brown fox",
        "--temp",
        "0",
        "-n",
        "12",
        "--ignore-eos",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        out(&o).trim_end_matches('\n'),
        greedy["text"].as_str().unwrap()
    );
    assert!(
        err(&o).contains("tok/s") && err(&o).contains("finish: length"),
        "{}",
        err(&o)
    );
}

#[test]
fn sampling_is_reproducible_by_seed_and_stops_on_a_stop_string() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), 427);
    let args = [
        "--temp",
        "1.2",
        "--top-k",
        "0",
        "--top-p",
        "1",
        "--min-p",
        "0",
        "-n",
        "24",
        "--ignore-eos",
    ];
    let seeded = |seed: &str| {
        let mut a = args.to_vec();
        a.extend(["--seed", seed]);
        generate_json(&model, &a)
    };
    let a = seeded("5");
    assert_eq!(tokens(&a), tokens(&seeded("5")));
    assert_ne!(tokens(&a), tokens(&seeded("6")));
    // A stop string taken from the middle of the output: the text ends right before it.
    let text = a["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 8, "too little text: {text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let mut with_stop = args.to_vec();
    with_stop.extend(["--seed", "5", "--stop", &stop]);
    let s = generate_json(&model, &with_stop);
    assert_eq!(s["finish"], "stop");
    assert_eq!(
        s["text"].as_str().unwrap(),
        &text[..text.find(&stop).unwrap()]
    );
}

#[test]
fn generate_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), 427);
    let m = model.to_string_lossy().into_owned();
    let base = ["generate", "--model", &m];
    let check = |extra: &[&str], text: &str| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let o = tally(&a);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", err(&o));
        assert!(
            err(&o).contains(text),
            "{extra:?}: stderr lacks `{text}`: {}",
            err(&o)
        );
    };
    // The synthetic file has no vocabulary of its own.
    check(&["--prompt", "hi"], "--tokenizer");
    check(
        &["--prompt", "hi", "--tokenizer", VOCAB, "--top-p", "0"],
        "top_p",
    );
    check(
        &["--prompt", "hi", "--tokenizer", VOCAB, "--temp=-1"],
        "temperature",
    );
    check(
        &["--prompt", "hi", "--tokenizer", VOCAB, "-n", "0"],
        "max-tokens",
    );
    check(&["--tokenizer", VOCAB, "--prompt", ""], "empty");
    check(
        &["--prompt", "hi", "--tokenizer", VOCAB, "--spec", "mtp"],
        "tiny-427.gguf has no MTP block",
    );
    check(
        &[
            "--prompt",
            "hi",
            "--tokenizer",
            VOCAB,
            "--spec",
            "mtp",
            "--draft-max",
            "0",
        ],
        "--draft-max 0",
    );
    // The tiny vocabulary file has no chat template.
    check(
        &["--prompt", "hi", "--tokenizer", VOCAB, "--chat"],
        "--template",
    );
    let small = synth(dir.path(), 100);
    let s = small.to_string_lossy();
    let o = tally(&[
        "generate",
        "--model",
        &s,
        "--tokenizer",
        VOCAB,
        "--prompt",
        "hi",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("427 tokens"), "{}", err(&o));
}

/// `(prompt tokens, resumed)` of each speeds line.
fn turns(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[prompt ")?;
            let (n, rest) = rest.split_once(" tokens (")?;
            let (r, _) = rest.split_once(" resumed)")?;
            Some((n.parse().ok()?, r.parse().ok()?))
        })
        .collect()
}

#[test]
fn chat_keeps_history_resumes_resets_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), 427);
    let m = model.to_string_lossy();
    let args = [
        "chat",
        "--model",
        &m,
        "--tokenizer",
        VOCAB,
        "--template",
        TEMPLATE,
        "--temp",
        "0",
        "-n",
        "8",
        "--system",
        "You are terse.",
    ];
    let o = tally_stdin(
        &args,
        "hello there\nand a second question\n/reset\nthird\n/exit\nnever read\n",
    );
    assert!(o.status.success(), "{}", err(&o));
    let stdout = out(&o);
    assert!(stdout.contains("> hello there") && stdout.contains("(conversation reset)"));
    assert!(!stdout.contains("never read"));
    let t = turns(&err(&o));
    assert_eq!(t.len(), 3, "{}", err(&o));
    // Turn 2 extends turn 1: everything before it came from the live state.
    assert_eq!(t[0].1, 0);
    assert!(t[1].0 > t[0].0 && t[1].1 >= t[0].0, "{t:?}");
    // After /reset nothing is resumed.
    assert_eq!(t[2].1, 0);
    // --no-resume re-reads the conversation, with the same prompt tokens.
    let mut nr = args.to_vec();
    nr.push("--no-resume");
    let o2 = tally_stdin(&nr, "hello there\nand a second question\n");
    let t2 = turns(&err(&o2));
    assert_eq!(t2.len(), 2, "{}", err(&o2));
    assert_eq!((t2[1].0, t2[1].1), (t[1].0, 0));
    // The answers are the same either way (greedy).
    assert!(
        stdout.starts_with(&out(&o2)),
        "{stdout:?} vs {:?}",
        out(&o2)
    );
    // End of input leaves cleanly.
    let o3 = tally_stdin(&args[..9], "hi\n");
    assert!(o3.status.success(), "{}", err(&o3));
    // A missing template file is bad input.
    let o4 = tally_stdin(
        &[
            "chat",
            "--model",
            &m,
            "--tokenizer",
            VOCAB,
            "--template",
            "/nonexistent.jinja",
        ],
        "",
    );
    assert_eq!(o4.status.code(), Some(2), "{}", err(&o4));
}

/// `--spec mtp` (the file's MTP block drafts) gives plain greedy decoding's tokens.
#[test]
fn generate_spec_mtp_is_plain_greedy() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny-mtp.gguf");
    let o = tally(&[
        "synth",
        "--preset",
        "tiny",
        "--quant",
        "q8_0",
        "--seed",
        "5",
        "--set",
        "vocab=427",
        "--mtp",
        "--out",
        &p.to_string_lossy(),
    ]);
    assert!(o.status.success(), "synth: {}", err(&o));
    let plain = generate_json(&p, &["--temp", "0", "-n", "14", "--ignore-eos"]);
    for k in ["1", "3"] {
        let spec = generate_json(
            &p,
            &[
                "--temp",
                "0",
                "-n",
                "14",
                "--ignore-eos",
                "--spec",
                "mtp",
                "--draft-max",
                k,
            ],
        );
        assert_eq!(tokens(&spec), tokens(&plain), "k {k}: {spec}");
        assert_eq!(spec["spec"]["draft"], "mtp");
        assert_eq!(spec["text"], plain["text"]);
        println!(
            "k {k}: MTP acceptance {}",
            spec["spec"]["stats"]["accepted"]
        );
    }
}

/// Collects a child's pipe in a thread, so the test can wait for what it has printed so far.
fn collect(
    mut pipe: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock().expect("lock").extend_from_slice(&chunk[..n]);
        }
    });
    buf
}

/// Waits (up to a minute) until `cond` holds on the collected text.
fn wait_for(buf: &std::sync::Mutex<Vec<u8>>, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let s = String::from_utf8_lossy(&buf.lock().expect("lock")).into_owned();
        if cond(&s) {
            return s;
        }
        assert!(
            t0.elapsed().as_secs() < 60,
            "timed out waiting for {what}: {s:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGINT to the child, as Ctrl-C in a terminal sends it.
fn interrupt(pid: u32) {
    let ok = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

/// Ctrl-C stops the answer being written, not the program: the next line is answered, in the
/// same conversation (resumed from the live state), and /exit leaves with status 0.
#[test]
fn chat_ctrl_c_stops_the_answer_not_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), 427);
    let m = model.to_string_lossy();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args([
            "chat",
            "--model",
            &m,
            "--tokenizer",
            VOCAB,
            "--template",
            TEMPLATE,
            "--temp",
            "0",
            "--ignore-eos",
            "-n",
            "7000",
            "--ctx",
            "16384",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tally chat");
    let mut stdin = c.stdin.take().expect("stdin");
    let stdout = collect(c.stdout.take().expect("stdout"));
    let stderr = collect(c.stderr.take().expect("stderr"));
    let answer_started = |after: usize| move |s: &str| s.len() > after + 40;

    stdin.write_all(b"tell me everything\n").expect("write");
    let shown = wait_for(
        &stdout,
        "the first answer",
        answer_started("> tell me everything\n".len()),
    );
    interrupt(c.id());
    wait_for(&stderr, "the first answer's end", |s| {
        s.contains("finish: cancelled")
    });

    let before = shown.len().max(stdout.lock().expect("lock").len());
    stdin.write_all(b"and then?\n").expect("write");
    wait_for(
        &stdout,
        "the second answer",
        answer_started(before + "> and then?\n".len()),
    );
    interrupt(c.id());
    wait_for(&stderr, "the second answer's end", |s| {
        s.matches("finish: cancelled").count() == 2
    });
    stdin.write_all(b"/exit\n").expect("write");
    drop(stdin);
    let status = c.wait().expect("wait");
    let err = String::from_utf8_lossy(&stderr.lock().expect("lock")).into_owned();
    assert!(status.success(), "{status:?} {err}");
    let t = turns(&err);
    assert_eq!(t.len(), 2, "{err}");
    // Both answers stopped early (each would otherwise run to 7000 tokens), and the second turn
    // resumed the first one's state: the program and the conversation went on.
    for l in err.lines().filter(|l| l.starts_with("[prompt ")) {
        let n: usize = l
            .split("generated ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("generated count");
        assert!(n < 7000, "{l}");
    }
    assert!(t[1].1 >= t[0].0, "{t:?}");
}
