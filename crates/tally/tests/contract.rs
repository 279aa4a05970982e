//! The exit-code contract on bad input, as one table: each row is a command on a broken file or
//! with a bad value, the exit code it must end with, and a text its stderr must hold. Rows are the
//! cases of issue 9 (each crashed, hung, allocated without bound or exited with the wrong code).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tally_gguf::{GgufFile, GgufWriter, MetaValue, TensorSpec};

fn tally() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tally"))
}

/// Runs `args` with a deadline: a hang is a failure of the contract, not of the test harness.
fn run(args: &[String], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let mut child = tally()
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tally");
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            let o: Output = child.wait_with_output().expect("output");
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            return (o.status.code(), err, t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tally {args:?} hung (killed after 60 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn synth(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.gguf");
    let o = tally()
        .args(["synth", "--preset", "tiny", "--quant", "q8_0", "--out"])
        .arg(&p)
        .output()
        .expect("synth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    p
}

/// Copies `src` to `dst` with metadata key `key` set to `value` and, optionally, the first
/// element of F32 tensor `nan_in` set to NaN.
fn rewrite(src: &Path, dst: &Path, key: Option<(&str, MetaValue)>, nan_in: Option<&str>) {
    let g = GgufFile::open(src).expect("open");
    let mut meta: Vec<(String, MetaValue)> = g.metadata().to_vec();
    if let Some((k, v)) = key {
        meta.iter_mut().find(|(n, _)| n == k).expect("key").1 = v;
    }
    let specs: Vec<TensorSpec> = g
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let f = std::fs::File::create(dst).expect("create");
    let mut w = GgufWriter::new(std::io::BufWriter::new(f), &meta, &specs).expect("writer");
    for t in g.tensors() {
        let mut data = g.tensor_data(t).to_vec();
        if nan_in == Some(t.name.as_str()) {
            data[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        w.write_data(&data).expect("data");
    }
    w.finish().expect("finish");
}

/// Exit code 2 and `text` in stderr; `once`: the text appears exactly once.
struct Row {
    what: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    code: i32,
    text: &'static str,
    once: bool,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn bad_input_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let good = synth(d);
    let gs = good.to_string_lossy().into_owned();
    let header = |name: &str, key: &str, v: MetaValue| -> String {
        let p = d.join(name);
        rewrite(&good, &p, Some((key, v)), None);
        p.to_string_lossy().into_owned()
    };
    let run4 = |m: &str| s(&["run", "--model", m, "--tokens", "4"]);
    let split2 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/converter/split/conv-a-mtp-q8_0-00002-of-00003.gguf")
        .to_string_lossy()
        .into_owned();
    let layers_2_63 = header("l63.gguf", "qwen35moe.block_count", MetaValue::U64(1 << 63));
    let layers_2_40 = header("l40.gguf", "qwen35moe.block_count", MetaValue::U64(1 << 40));
    let layers_1e7 = header(
        "l1e7.gguf",
        "qwen35moe.block_count",
        MetaValue::U64(10_000_000),
    );
    let layers_1e6 = header(
        "l1e6.gguf",
        "qwen35moe.block_count",
        MetaValue::U64(1_000_000),
    );
    let heads = header(
        "heads.gguf",
        "qwen35moe.attention.head_count",
        MetaValue::U64((1 << 59) + 8),
    );
    let state = header(
        "state.gguf",
        "qwen35moe.ssm.state_size",
        MetaValue::U64((1 << 62) + 64),
    );
    let nan = d.join("nan.gguf");
    rewrite(&good, &nan, None, Some("blk.0.attn_norm.weight"));
    let nan = nan.to_string_lossy().into_owned();
    let fifo = d.join("fifo.gguf");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let fifo = fifo.to_string_lossy().into_owned();
    let dir_s = d.to_string_lossy().into_owned();
    let missing = d.join("missing.gguf").to_string_lossy().into_owned();
    let victim = d.join("victim.gguf");
    std::fs::copy(&good, &victim).expect("copy");
    let victim = victim.to_string_lossy().into_owned();

    // The tiny model's context: a step at this depth needs one position more.
    let ctx_len = GgufFile::open(&good)
        .expect("open")
        .metadata()
        .iter()
        .find(|(k, _)| k == "qwen35moe.context_length")
        .map(|(_, v)| match v {
            MetaValue::U32(n) => u64::from(*n),
            MetaValue::U64(n) => *n,
            other => panic!("context_length {other:?}"),
        })
        .expect("context_length")
        .to_string();
    let row = |what, args, code, text| Row {
        what,
        args,
        env: vec![],
        code,
        text,
        once: false,
    };
    let mut rows = vec![
        row(
            "block_count 2^63",
            run4(&layers_2_63),
            2,
            "block_count 9223372036854775808 exceeds the limit of 1024",
        ),
        row(
            "block_count 2^40",
            run4(&layers_2_40),
            2,
            "block_count 1099511627776 exceeds",
        ),
        row(
            "block_count 10^7",
            run4(&layers_1e7),
            2,
            "block_count 10000000 exceeds",
        ),
        row(
            "block_count 10^6",
            run4(&layers_1e6),
            2,
            "block_count 1000000 exceeds",
        ),
        row(
            "head_count 2^59+8",
            run4(&heads),
            2,
            "attention.head_count 576460752303423496 exceeds",
        ),
        row(
            "state_size 2^62+64",
            run4(&state),
            2,
            "ssm.state_size 4611686018427387968 exceeds",
        ),
        row("NaN weight", run4(&nan), 2, "node blk.0."),
        row(
            "a split model's second part",
            run4(&split2),
            2,
            "part 2 of a model split into 3 files; open the first part",
        ),
        row(
            "FIFO model",
            run4(&fifo),
            2,
            "is a FIFO (named pipe), not a regular file",
        ),
        row(
            "directory model",
            run4(&dir_s),
            2,
            "is a directory, not a regular file",
        ),
        Row {
            once: true,
            ..row(
                "missing model",
                run4(&missing),
                2,
                "No such file or directory",
            )
        },
        Row {
            env: vec![("TALLY_TEST_TRUNCATE_MAPPED", "1")],
            ..row(
                "truncated while mapped",
                run4(&victim),
                2,
                "the model file changed while tally had it mapped",
            )
        },
        row(
            "--tokens 2^40",
            s(&["run", "--model", &gs, "--tokens", "1099511627776"]),
            2,
            "--tokens 1099511627776: longer than the model's context",
        ),
        row(
            "-n u64::MAX",
            s(&[
                "run",
                "--model",
                &gs,
                "--tokens",
                "4",
                "-n",
                "18446744073709551615",
            ]),
            2,
            "exceed the model's context",
        ),
        row(
            "-t 100000",
            s(&["run", "--model", &gs, "--tokens", "4", "-t", "100000"]),
            2,
            "-t 100000: too many threads",
        ),
        row(
            "--backend foo",
            s(&["run", "--model", &gs, "--tokens", "4", "--backend", "foo"]),
            2,
            "unknown backend",
        ),
        row(
            "bench --backend foo",
            s(&["bench", "-m", &gs, "--backend", "foo"]),
            2,
            "unknown backend",
        ),
        row(
            "kernels --arch sm_9",
            s(&["kernels", "--arch", "sm_9"]),
            2,
            "--arch sm_9: expected a real architecture such as sm_90a",
        ),
        row(
            "graph -p 0",
            s(&["graph", "--model", &gs, "-p", "0"]),
            2,
            "-p 0: a prompt needs at least one token",
        ),
        row(
            "bench -p 0",
            s(&["bench", "-m", &gs, "-p", "0"]),
            2,
            "-p 0: a prompt needs at least one token",
        ),
        row(
            "bench -r 0",
            s(&["bench", "-m", &gs, "-r", "0"]),
            2,
            "-r 0: the noise gate needs at least 3",
        ),
        row(
            "measure --max-retries 101",
            s(&["measure", "--model", &gs, "--max-retries", "101"]),
            2,
            "--max-retries 101: at most 100",
        ),
        row(
            "measure --best-of 0",
            s(&["measure", "--model", &gs, "--best-of", "0"]),
            2,
            "--best-of 0: runs per sample must be within 1..=10",
        ),
        row(
            "ledger --outlier-floor 0.5",
            s(&[
                "ledger",
                "--model",
                &gs,
                "--peer",
                "self",
                "--outlier-floor",
                "0.5",
            ]),
            2,
            "--outlier-floor 0.5: a fraction of the median from 0 to 0.25",
        ),
        row(
            "measure --outlier-floor -0.1",
            s(&["measure", "--model", &gs, "--outlier-floor=-0.1"]),
            2,
            "--outlier-floor -0.1: a fraction of the median from 0 to 0.25",
        ),
        row(
            "bench -r 1",
            s(&["bench", "-m", &gs, "-r", "1"]),
            2,
            "-r 1: the noise gate needs at least 3",
        ),
        row(
            "bench -r 2",
            s(&["bench", "-m", &gs, "-r", "2"]),
            2,
            "-r 2: the noise gate needs at least 3",
        ),
        row(
            "bench --spec mtp on a file without an MTP block",
            s(&["bench", "-m", &gs, "--spec", "mtp"]),
            2,
            "tiny.gguf has no MTP block",
        ),
        row(
            "bench --replay-acceptance 2",
            s(&[
                "bench",
                "-m",
                &gs,
                "--spec",
                "mtp",
                "--replay-acceptance",
                "2",
            ]),
            2,
            "--replay-acceptance 2: a probability in [0, 1]",
        ),
        row(
            "bench -d without a decode test",
            s(&["bench", "-m", &gs, "-d", "16", "-n", "0"]),
            2,
            "-d times the tgN test: give -n 1 or more",
        ),
        row(
            "bench -d past the context",
            s(&["bench", "-m", &gs, "-d", "100000000"]),
            2,
            "context",
        ),
        row(
            "bench --spec foo",
            s(&["bench", "-m", &gs, "--spec", "foo"]),
            2,
            "invalid value 'foo'",
        ),
        row(
            "ledger --step-at past the context",
            s(&[
                "ledger",
                "--model",
                &gs,
                "--peer",
                "self",
                "--step-at",
                "100000000",
            ]),
            2,
            "--step-at 100000000: a step after 100000000 tokens needs 100000001 positions, more than the model's context",
        ),
        row(
            "measure --step-at at the context's last position",
            s(&["measure", "--model", &gs, "--step-at", &ctx_len]),
            2,
            "positions, more than the model's context of",
        ),
        row(
            "measure --step-at 0",
            s(&["measure", "--model", &gs, "--step-at", "0"]),
            2,
            "--step-at 0: a decode step needs a context of at least one token",
        ),
        row(
            "ledger --step-at with -p",
            s(&[
                "ledger",
                "--model",
                &gs,
                "--peer",
                "self",
                "--step-at",
                "16",
                "-p",
                "8",
            ]),
            2,
            "'--step-at <D>' cannot be used with '--tokens <TOKENS>'",
        ),
        row(
            "ledger --step-at -n past the context",
            s(&[
                "ledger",
                "--model",
                &gs,
                "--peer",
                "self",
                "--step-at",
                "16",
                "-n",
                "18446744073709551615",
            ]),
            2,
            "exceed the model's context",
        ),
        row(
            "opbench -r 2",
            s(&["opbench", "--model", &gs, "-r", "2"]),
            2,
            "-r 2: the noise gate needs at least 3",
        ),
        row(
            "bench -t 100000",
            s(&["bench", "-m", &gs, "-t", "100000"]),
            2,
            "too many threads",
        ),
    ];
    rows.retain(|r| std::env::var("CONTRACT_ROW").map_or(true, |f| r.what.contains(&f)));
    // The truncation hook exists in debug builds only (cmd/common.rs): a release build of the
    // tests (`cargo test --release`) has nothing to provoke it with.
    if !cfg!(debug_assertions) {
        rows.retain(|r| r.what != "truncated while mapped");
    }
    let mut failures = Vec::new();
    for r in &rows {
        let env: Vec<(&str, &str)> = r.env.clone();
        let (code, err, took) = run(&r.args, &env);
        if std::env::var_os("CONTRACT_SHOW").is_some() {
            eprintln!("{}: exit {code:?} in {took:?}: {err}", r.what);
        }
        let count = err.matches(r.text).count();
        let ok = code == Some(r.code)
            && count >= 1
            && (!r.once || count == 1)
            && !err.contains("panicked");
        if !ok {
            failures.push(format!(
                "{}: exit {code:?} (want {}), {count} x `{}`, {took:?}; stderr: {err}",
                r.what, r.code, r.text
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `tally ... | head -1`: the pipe closes early; tally must end quietly (no panic message).
#[test]
fn broken_pipe_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 20 000 logit lines (~300 KB): far more than a pipe buffers, so the writes must fail.
    let good = dir.path().join("wide.gguf");
    let o = tally()
        .args([
            "synth",
            "--preset",
            "tiny",
            "--quant",
            "q8_0",
            "--set",
            "vocab=20000",
            "--out",
        ])
        .arg(&good)
        .output()
        .expect("synth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut child = tally()
        .args(["run", "--model"])
        .arg(&good)
        .args(["--tokens", "4", "--top", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    let out = child.stdout.take().expect("stdout");
    BufReader::new(out).read_line(&mut line).expect("line");
    // The reader is dropped here: the pipe is closed with most of the output unwritten.
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert!(o.status.code() != Some(101), "{:?}: {err}", o.status);
}
