//! `tally bench` reads like llama-bench: each output format is parsed as llama-bench's readers
//! would parse it, and its field names and order are checked against llama-bench's own list.
//!
//! The reference is llama-bench's `test::get_fields()` (tools/llama-bench/llama-bench.cpp in the
//! llama.cpp of llama-cpp-python 0.3.36), written out below: it is the interface, not code.
//! A field tally does not have must be in `LEFT_OUT`, which the README documents.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// llama-bench's CSV/JSON fields, in its order.
const LLAMA_BENCH_FIELDS: [&str; 42] = [
    "build_commit",
    "build_number",
    "cpu_info",
    "gpu_info",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "type_k",
    "type_v",
    "n_gpu_layers",
    "n_cpu_moe",
    "split_mode",
    "main_gpu",
    "no_kv_offload",
    "flash_attn",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "lazy_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "repack",
    "fit_target",
    "fit_min_ctx",
    "n_prompt",
    "n_gen",
    "n_depth",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
];

/// llama-bench settings tally has no such setting for (README, "Differences from llama-bench").
const LEFT_OUT: [&str; 21] = [
    "cpu_mask",
    "cpu_strict",
    "poll",
    "type_k",
    "type_v",
    "n_gpu_layers",
    "n_cpu_moe",
    "split_mode",
    "main_gpu",
    "no_kv_offload",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "lazy_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "repack",
    "fit_target",
    "fit_min_ctx",
];

fn tally() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tally"))
}

fn synth(dir: &Path) -> PathBuf {
    let p = dir.join("bench-tiny.gguf");
    let o = tally()
        .args([
            "synth", "--preset", "tiny", "--quant", "q8_0", "--seed", "3", "--out",
        ])
        .arg(&p)
        .output()
        .expect("synth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    p
}

/// Runs `tally bench` on `model` in format `fmt`: pp8 and tg2, 3 windows, one thread. The gate's
/// busy limit is high so a loaded CI machine rarely exhausts it (timing is not under test).
fn bench(model: &Path, dir: &Path, fmt: &str) -> String {
    bench_with(model, dir, fmt, &[])
}

/// [`bench`] with more arguments.
fn bench_with(model: &Path, dir: &Path, fmt: &str, extra: &[&str]) -> String {
    let o = tally()
        .arg("bench")
        .arg("-m")
        .arg(model)
        .args([
            "-p",
            "8",
            "-n",
            "2",
            "-r",
            "3",
            "-t",
            "1",
            "--busy-limit",
            "64",
        ])
        .args(extra)
        .arg("--out-dir")
        .arg(dir.join(fmt))
        .args(["-o", fmt])
        .output()
        .expect("bench");
    // 3: the noise gate ran out of retries (outliers on a loaded machine); the output is
    // complete either way, and timing is not what this test checks.
    assert!(
        matches!(o.status.code(), Some(0) | Some(3)),
        "bench -o {fmt}: {:?} {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

/// Checks one test object as llama-bench's JSON printer writes it.
fn check_test_object(t: &Value) {
    let obj = t.as_object().expect("a test is an object");
    for f in LLAMA_BENCH_FIELDS.iter().filter(|f| !LEFT_OUT.contains(f)) {
        assert!(obj.contains_key(*f), "missing llama-bench field {f}: {t}");
    }
    for f in LEFT_OUT {
        assert!(!obj.contains_key(f), "{f} is documented as left out");
    }
    let n_prompt = t["n_prompt"].as_u64().expect("n_prompt");
    let n_gen = t["n_gen"].as_u64().expect("n_gen");
    let test = t["test"].as_str().expect("test");
    match test {
        "pp8" => assert_eq!((n_prompt, n_gen), (8, 0)),
        "tg2" => assert_eq!((n_prompt, n_gen), (0, 2)),
        "tg2 @ d16" => assert_eq!((n_prompt, n_gen, t["n_depth"].as_u64()), (0, 2, Some(16))),
        other => panic!("unexpected test {other}"),
    }
    let ns: Vec<f64> = t["samples_ns"]
        .as_array()
        .expect("samples_ns")
        .iter()
        .map(|v| v.as_f64().expect("ns"))
        .collect();
    let ts: Vec<f64> = t["samples_ts"]
        .as_array()
        .expect("samples_ts")
        .iter()
        .map(|v| v.as_f64().expect("ts"))
        .collect();
    assert!(
        ns.len() >= 3 && ns.len() == ts.len(),
        "{} / {}",
        ns.len(),
        ts.len()
    );
    let tokens = (n_prompt + n_gen) as f64;
    for (n, s) in ns.iter().zip(&ts) {
        assert!(*n > 0.0 && s.is_finite() && *s > 0.0);
        // llama-bench: ts = tokens / seconds, per sample (ns truncated to whole nanoseconds).
        let want = tokens * 1e9 / n;
        assert!((s - want).abs() <= 1e-6 * want, "sample {s} t/s vs {want}");
    }
    // avg_ts and stddev_ts are the mean and sample standard deviation of samples_ts.
    let k = ts.len() as f64;
    let mean = ts.iter().sum::<f64>() / k;
    let sd = (ts.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    let avg = t["avg_ts"].as_f64().expect("avg_ts");
    let sdv = t["stddev_ts"].as_f64().expect("stddev_ts");
    assert!((avg - mean).abs() <= 1e-9 * mean, "avg_ts {avg} vs {mean}");
    assert!(
        (sdv - sd).abs() <= 1e-9 * mean.max(1.0),
        "stddev_ts {sdv} vs {sd}"
    );
    let avg_ns = t["avg_ns"].as_f64().expect("avg_ns");
    let mean_ns = ns.iter().sum::<f64>() / k;
    assert!((avg_ns - mean_ns).abs() <= 1.0 + 1e-9 * mean_ns);
    assert!(
        t["model_type"]
            .as_str()
            .expect("model_type")
            .starts_with("qwen35moe ?B Q8_0"),
        "{}",
        t["model_type"]
    );
    assert!(t["model_size"].as_u64().expect("model_size") > 0);
    assert!(t["model_n_params"].as_u64().expect("model_n_params") > 0);
    assert_eq!(t["n_threads"].as_u64(), Some(1));
    // How the engine ran, from the backend's own options (the CPU's: its threads).
    assert_eq!(t["engine_options"], serde_json::json!(["threads=1"]));
    // tally's physical batch: the default, as n_batch and n_ubatch (one batch size).
    assert_eq!(t["n_ubatch"].as_u64(), Some(8192));
    assert_eq!(t["n_batch"].as_u64(), Some(8192));
}

#[test]
fn bench_output_formats_follow_llama_bench() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth(dir.path());

    // json: one array of tests.
    let json: Value = serde_json::from_str(&bench(&model, dir.path(), "json")).expect("json");
    let tests = json.as_array().expect("json is an array");
    assert_eq!(tests.len(), 2);
    tests.iter().for_each(check_test_object);

    // jsonl: one object per line, the same objects.
    let jsonl = bench(&model, dir.path(), "jsonl");
    let lines: Vec<&str> = jsonl.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{jsonl}");
    for l in &lines {
        check_test_object(&serde_json::from_str(l).expect("jsonl line"));
    }

    // csv: a header, llama-bench's fields in llama-bench's order, then tally's own; every cell
    // quoted as llama-bench's escape_csv does.
    let csv = bench(&model, dir.path(), "csv");
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().expect("csv header").split(',').collect();
    let ours_of_theirs: Vec<&str> = header
        .iter()
        .copied()
        .filter(|h| LLAMA_BENCH_FIELDS.contains(h))
        .collect();
    let theirs_we_have: Vec<&str> = LLAMA_BENCH_FIELDS
        .iter()
        .copied()
        .filter(|f| !LEFT_OUT.contains(f))
        .collect();
    assert_eq!(
        ours_of_theirs, theirs_we_have,
        "llama-bench's fields, its order"
    );
    let first_own = header
        .iter()
        .position(|h| !LLAMA_BENCH_FIELDS.contains(h))
        .expect("tally's own fields");
    assert!(
        header[first_own..]
            .iter()
            .all(|h| !LLAMA_BENCH_FIELDS.contains(h)),
        "tally's own fields come after llama-bench's: {header:?}"
    );
    let body: Vec<&str> = rows.collect();
    assert_eq!(body.len(), 2);
    for r in &body {
        let cells: Vec<&str> = r.split("\",\"").collect();
        assert_eq!(cells.len(), header.len(), "{r}");
        assert!(r.starts_with('"') && r.ends_with('"'));
    }

    // md: llama-bench's table: | model | size | params | backend | threads | fa | test | t/s |,
    // numbers right-aligned (`---:`), `mean ± sd`, and a build: line.
    let md = bench(&model, dir.path(), "md");
    let mut ml = md.lines();
    let head: Vec<String> = ml
        .next()
        .expect("md header")
        .split('|')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        head,
        [
            "model", "size", "params", "backend", "threads", "fa", "test", "t/s"
        ]
    );
    let rule = ml.next().expect("md rule");
    let aligns: Vec<&str> = rule
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(aligns.len(), head.len());
    assert!(
        aligns[0].ends_with('-') && aligns[7].ends_with(':'),
        "{rule}"
    );
    let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).skip(2).collect();
    assert_eq!(table.len(), 2, "{md}");
    assert!(table[0].contains("pp8") && table[1].contains("tg2"));
    assert!(table.iter().all(|l| l.contains(" ± ")));
    assert!(md.lines().any(|l| l.starts_with("build: tally ")), "{md}");

    // text: the same columns, no Markdown.
    let text = bench(&model, dir.path(), "text");
    let first = text.lines().next().expect("text header");
    assert!(!first.contains('|'));
    let cols: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "model", "size", "params", "backend", "threads", "fa", "test", "t/s"
        ]
    );
}

/// `-d D`: the decode test again after an untimed prefill of D tokens, as its own row
/// (`tgN @ dD`, `n_depth` D), llama-bench's spelling; depth 0 is the plain tgN row.
#[test]
fn bench_decode_at_depth_is_its_own_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth(dir.path());
    let json: Value =
        serde_json::from_str(&bench_with(&model, dir.path(), "json", &["-d", "0,16"]))
            .expect("json");
    let tests = json.as_array().expect("json is an array");
    let got: Vec<(String, u64, u64, u64)> = tests
        .iter()
        .map(|t| {
            (
                t["test"].as_str().unwrap_or("?").to_string(),
                t["n_prompt"].as_u64().unwrap_or(99),
                t["n_gen"].as_u64().unwrap_or(99),
                t["n_depth"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("pp8".to_string(), 8, 0, 0),
            ("tg2".to_string(), 0, 2, 0),
            ("tg2 @ d16".to_string(), 0, 2, 16),
        ]
    );
    tests.iter().for_each(check_test_object);
    for t in tests {
        assert!(t["avg_ts"].as_f64().is_some_and(|x| x > 0.0), "{t}");
    }
}

/// `--spec mtp` without `--replay-acceptance` drafts with the file's MTP block: its row says
/// so, and has no target acceptance (the measured one is whatever the random head gives).
/// With `-d`, one speculative row per depth, after a prompt that deep (the bench checks each
/// against plain greedy decoding and fails on a difference).
#[test]
fn bench_spec_mtp_drafts_with_the_files_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("bench-mtp.gguf");
    let o = tally()
        .args([
            "synth", "--preset", "tiny", "--quant", "q8_0", "--seed", "4", "--mtp", "--out",
        ])
        .arg(&p)
        .output()
        .expect("synth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tally()
        .arg("bench")
        .arg("-m")
        .arg(&p)
        .args([
            "-p",
            "4",
            "-n",
            "6",
            "-d",
            "0,24",
            "-r",
            "3",
            "-t",
            "1",
            "--busy-limit",
            "64",
        ])
        .args([
            "--spec",
            "mtp",
            "--draft-max",
            "2",
            "-o",
            "json",
            "--out-dir",
        ])
        .arg(dir.path().join("out"))
        .output()
        .expect("bench");
    // 3: the noise gate ran out of retries; timing is not under test.
    assert!(
        matches!(o.status.code(), Some(0) | Some(3)),
        "{:?} {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let json: Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = json.as_array().expect("json is an array");
    let spec = rows
        .iter()
        .find(|t| t["test"] == "tg6 spec k=2")
        .expect("the spec row");
    assert_eq!(spec["spec"]["draft"], "mtp", "{spec}");
    assert!(spec["spec"]["target_acceptance"].is_null(), "{spec}");
    assert_eq!(spec["n_depth"], 0, "{spec}");
    let deep = rows
        .iter()
        .find(|t| t["test"] == "tg6 @ d24 spec k=2")
        .expect("the spec row at depth 24");
    assert_eq!(deep["n_depth"], 24, "{deep}");
    assert!(deep["avg_ts"].as_f64().is_some_and(|x| x > 0.0), "{deep}");
    println!(
        "MTP head acceptance on the synth file: {}",
        spec["spec"]["acceptance"]
    );
}
