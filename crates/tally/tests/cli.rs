//! The CLI end to end: bad input gives a clear error and exit code 2; the ledger runs on the tiny
//! model and writes its reports.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tally_gguf::{GgmlType, GgufWriter, MetaValue, TensorSpec};

fn tally(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .output()
        .expect("run tally")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn synth(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let p = dir.join(name);
    let mut args = vec!["synth", "--preset", "tiny", "--quant", "q8_0", "--out"];
    let ps = p.to_string_lossy().into_owned();
    args.push(&ps);
    args.extend_from_slice(extra);
    let o = tally(&args);
    assert!(o.status.success(), "synth failed: {}", stderr(&o));
    p
}

/// A small GGUF with the given metadata and one tensor.
fn write_gguf(path: &Path, meta: &[(String, MetaValue)], ty: GgmlType) {
    let f = std::fs::File::create(path).expect("create");
    let spec = TensorSpec {
        name: "token_embd.weight".into(),
        dims: vec![256, 4],
        ty,
    };
    let mut w = GgufWriter::new(f, meta, std::slice::from_ref(&spec)).expect("writer");
    let bytes = vec![0u8; spec.ty.row_bytes(256).expect("row bytes") as usize * 4];
    w.write_data(&bytes).expect("data");
    w.finish().expect("finish");
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
fn not_a_gguf_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.gguf");
    std::fs::write(&p, b"this is not a model file at all").expect("write");
    let o = tally(&["run", "--model", &p.to_string_lossy(), "--tokens", "4"]);
    assert_bad_input(&o, "magic");
}

fn split_part(i: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../engine/tests/fixtures/converter/split/conv-a-mtp-q8_0-{i:05}-of-00003.gguf"
    ))
}

/// A split model (llama.cpp's PREFIX-0000N-of-00003.gguf parts) runs from its first part, and
/// `info` lists the parts; a later part, or a first part whose siblings are gone, is bad input
/// that names what to open or what is missing.
#[test]
fn split_models_run_from_the_first_part_and_other_parts_are_bad_input() {
    let first = split_part(1).to_string_lossy().into_owned();
    let o = tally(&["info", "--model", &first]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("split model: 3 parts"), "{out}");
    let o = tally(&["run", "--model", &first, "--tokens", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let second = split_part(2).to_string_lossy().into_owned();
    let o = tally(&["run", "--model", &second, "--tokens", "3"]);
    assert_bad_input(
        &o,
        "part 2 of a model split into 3 files; open the first part",
    );
    assert_bad_input(&o, "conv-a-mtp-q8_0-00001-of-00003.gguf");

    let dir = tempfile::tempdir().expect("tempdir");
    let lone = dir.path().join("conv-a-mtp-q8_0-00001-of-00003.gguf");
    std::fs::copy(split_part(1), &lone).expect("copy");
    let o = tally(&["info", "--model", &lone.to_string_lossy()]);
    assert_bad_input(&o, "part 2 of 3");
    assert_bad_input(&o, "conv-a-mtp-q8_0-00002-of-00003.gguf, cannot be opened");
}

#[test]
fn truncated_model_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "t.gguf", &[]);
    let bytes = std::fs::read(&p).expect("read");
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let o = tally(&["run", "--model", &cut.to_string_lossy(), "--tokens", "4"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cut.gguf"), "{}", stderr(&o));
}

#[test]
fn wrong_architecture_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("llama.gguf");
    write_gguf(
        &p,
        &[(
            "general.architecture".into(),
            MetaValue::String("llama".into()),
        )],
        GgmlType::F32,
    );
    let o = tally(&["run", "--model", &p.to_string_lossy(), "--tokens", "4"]);
    assert_bad_input(&o, "unsupported architecture `llama`");
}

#[test]
fn missing_key_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("nokeys.gguf");
    write_gguf(
        &p,
        &[(
            "general.architecture".into(),
            MetaValue::String("qwen35moe".into()),
        )],
        GgmlType::F32,
    );
    let o = tally(&["run", "--model", &p.to_string_lossy(), "--tokens", "4"]);
    assert_bad_input(&o, "missing metadata key `qwen35moe.block_count`");
}

#[test]
fn unsupported_tensor_types_are_bad_input_and_all_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = synth(dir.path(), "good.gguf", &[]);
    let file = tally_gguf::GgufFile::open(&good).expect("open");
    // The same model with three tensors re-typed to types tally does not support.
    let retype = [
        ("token_embd.weight", GgmlType::IQ2_XXS),
        ("blk.0.ffn_down_exps.weight", GgmlType::IQ1_S),
        ("blk.3.ffn_up_exps.weight", GgmlType::TQ2_0),
    ];
    let meta: Vec<(String, MetaValue)> = file
        .metadata()
        .iter()
        .filter(|(k, _)| k != "general.alignment")
        .cloned()
        .collect();
    let specs: Vec<TensorSpec> = file
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: retype
                .iter()
                .find(|(n, _)| *n == t.name)
                .map_or(t.ty, |(_, ty)| *ty),
        })
        .collect();
    let bad = dir.path().join("iq.gguf");
    let mut w = GgufWriter::new(std::fs::File::create(&bad).expect("create"), &meta, &specs)
        .expect("writer");
    for (t, s) in file.tensors().iter().zip(&specs) {
        if s.ty == t.ty {
            w.write_data(file.tensor_data(t)).expect("data");
        } else {
            let rows: u64 = s.dims[1..].iter().product();
            let n = s.ty.row_bytes(s.dims[0]).expect("rb") * rows;
            w.write_data(&vec![0u8; n as usize]).expect("data");
        }
    }
    w.finish().expect("finish");
    let bp = bad.to_string_lossy().into_owned();
    for args in [
        vec!["run", "--model", bp.as_str(), "--tokens", "4"],
        vec!["check", "--model", bp.as_str()],
    ] {
        let o = tally(&args);
        assert_bad_input(
            &o,
            "unsupported tensor types: token_embd.weight IQ2_XXS, \
             blk.0.ffn_down_exps.weight IQ1_S, blk.3.ffn_up_exps.weight TQ2_0 (3 tensor(s))",
        );
    }
}

#[test]
fn token_outside_vocabulary_and_too_long_prompt_are_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "v.gguf", &["--set", "context_length=32"]);
    let ps = p.to_string_lossy().into_owned();
    let o = tally(&["run", "--model", &ps, "--token-ids", "1,2,99999"]);
    assert_bad_input(&o, "token id 99999 is outside the vocabulary of 512");
    let o = tally(&["run", "--model", &ps, "--tokens", "40"]);
    assert_bad_input(
        &o,
        "--tokens 40: longer than the model's context of 32 positions",
    );
}

#[test]
fn bad_arguments_are_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("m.gguf");
    let os = out.to_string_lossy().into_owned();
    let o = tally(&["synth", "--preset", "huge", "--out", &os]);
    assert_bad_input(&o, "unknown preset `huge`");
    let o = tally(&["synth", "--quant", "iq2", "--out", &os]);
    assert_bad_input(&o, "unknown quant mix `iq2`");
    let o = tally(&["synth", "--set", "n_layers=zero", "--out", &os]);
    assert_bad_input(&o, "`zero` is not a count");
    let o = tally(&["synth", "--set", "n_experts_used=99", "--out", &os]);
    assert_bad_input(&o, "expert_used_count 99 exceeds expert_count 8");
    assert!(!out.exists(), "a failed synth must not leave a file");
    let o = tally(&["ledger", "--reanalyse", "--peer", "self", "--model", &os]);
    assert_bad_input(
        &o,
        "--reanalyse judges the replay windows of two measurement files",
    );
}

#[test]
fn run_prints_logits_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "r.gguf", &[]);
    let o = tally(&[
        "run",
        "--model",
        &p.to_string_lossy(),
        "--tokens",
        "9",
        "-n",
        "2",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["prompt_tokens"], 9);
    assert_eq!(v["decoded"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["top_logits"].as_array().map(Vec::len), Some(10));
    // One digest per logits vector (prefill, then each decode step), all different.
    let d: Vec<&str> = v["logits_digests"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(d.len(), 3, "{d:?}");
    assert!(d[0] != d[1] && d[1] != d[2] && d.iter().all(|x| x.len() == 16));
}

#[test]
fn graph_passes_and_unpruned_plan_shows_dead_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "g.gguf", &[]);
    let ps = p.to_string_lossy().into_owned();
    let o = tally(&["graph", "--model", &ps, "-p", "16", "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["graph"]["issues"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["dead_work"]["partial"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["dead_work"]["dead"].as_array().map(Vec::len), Some(0));
    let o = tally(&[
        "graph",
        "--model",
        &ps,
        "-p",
        "16",
        "--no-prune",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let partial = v["dead_work"]["partial"].as_array().expect("partial");
    assert!(
        partial.iter().any(|n| n["name"] == "blk.3.attn_output"),
        "the unpruned last layer's output projection is dead work"
    );
}

#[test]
fn ledger_of_tally_against_itself_writes_every_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "l.gguf", &[]);
    let out = dir.path().join("out");
    let o = tally(&[
        "ledger",
        "--model",
        &p.to_string_lossy(),
        "--peer",
        "self",
        "-p",
        "8",
        "-r",
        "3",
        "--op-reps",
        "3",
        "--busy-limit",
        "64",
        "--out-dir",
        &out.to_string_lossy(),
    ]);
    // 3: measured, but a validation failed or the noise gate ran out of retries (a loaded
    // machine); then the headline must say so.
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code() == Some(3),
        stdout.contains("Verdict: NO VERDICT"),
        "{stdout}"
    );
    for f in ["ledger-pp8.md", "ledger-pp8.json", "ledger-pp8.svg"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let svg = std::fs::read_to_string(out.join("ledger-pp8.svg")).expect("svg");
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is valid XML");
    let text: String = doc
        .descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" ");
    for label in [
        "Dense projections",
        "MoE experts gate/up",
        "Delta rule (linear-attention recurrence)",
    ] {
        assert!(text.contains(label), "SVG lacks `{label}`");
    }
    // The same ledger from the two measurement files.
    let a = out.join("tally-cpu-pp8.measurement.json");
    let b = out.join("self-cpu-pp8.measurement.json");
    // By default both sides' routed ops were timed with the model's own routing of the prompt,
    // recorded once (by the first subject) and fed to both: the same median layer's table.
    let mut tables = Vec::new();
    for f in [&a, &b] {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f).expect("measurement")).expect("json");
        let ob = &m["opbench"];
        assert_eq!(ob["routing"], "model");
        let t = &ob["routing_tables"][0];
        assert_eq!(
            (&t["routing"], &t["recorded_by"]),
            (&"model".into(), &"tally".into())
        );
        assert_eq!(t["n_tokens"], 8);
        tables.push(t.clone());
    }
    assert_eq!(tables[0], tables[1]);
    let o = tally(&[
        "ledger",
        &a.to_string_lossy(),
        &b.to_string_lossy(),
        "--out-dir",
        &out.to_string_lossy(),
    ]);
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let o = tally(&["ledger", &a.to_string_lossy(), &p.to_string_lossy()]);
    assert_bad_input(&o, "is not a tally measurement");
}

#[test]
fn check_of_the_cpu_against_itself_passes_with_every_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "c.gguf", &[]);
    let o = tally(&[
        "check",
        "--model",
        &p.to_string_lossy(),
        "--backend",
        "cpu",
        "--tokens",
        "3,9",
        "-n",
        "1",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["pass"], true);
    let cases = v["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 3);
    for c in cases {
        assert_eq!(c["worst_rel_err"], 0.0);
        assert_eq!(c["routing_flips"], 0);
        assert_eq!(c["repeatable"], true);
    }
}

/// The ledger against the real peer, when this build has it (CI builds with `--features llama`).
#[cfg(feature = "llama")]
#[test]
fn ledger_against_llama_cpp_on_the_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Q4_K_M: its downs change type by layer, so an op key holds few layers, one of them the
    // last (llama.cpp routes all of its rows, tally only the logit row's): the recorded table
    // fed to each op must be chosen by the op's token count (the demo failed on this once).
    let p = dir.path().join("p.gguf");
    let ps = p.to_string_lossy().into_owned();
    let o = tally(&[
        "synth", "--preset", "tiny", "--quant", "q4_k_m", "--out", &ps,
    ]);
    assert!(o.status.success(), "synth failed: {}", stderr(&o));
    let out = dir.path().join("out");
    let o = tally(&[
        "ledger",
        "--model",
        &p.to_string_lossy(),
        "--peer",
        "llama.cpp",
        "-p",
        "16",
        "-r",
        "3",
        "--op-reps",
        "3",
        "--busy-limit",
        "64",
        "-o",
        "json",
        "--out-dir",
        &out.to_string_lossy(),
    ]);
    // 3: no verdict on a loaded machine (the reports are still written).
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["a"]["engine"]["engine"], "tally");
    assert_eq!(v["b"]["engine"]["engine"], "llama.cpp");
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.iter().any(|r| r["category"] == "moe_gate_up"));
    assert!(out.join("ledger-pp16.svg").exists());
    // Both sides timed their MoE ops on tally's recorded routing; llama.cpp's own router
    // agrees with it (near-ties aside) over every whole-prompt layer.
    let m: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("llama.cpp-cpu-pp16.measurement.json")).expect("file"),
    )
    .expect("json");
    assert_eq!(m["opbench"]["routing"], "model");
    let g = &m["opbench"]["routing_agreement"][0];
    assert_eq!(
        (&g["a"], &g["b"]),
        (&"tally".into(), &"llama.cpp".into()),
        "{g}"
    );
    let (sets, equal) = (
        g["sets"].as_u64().expect("sets"),
        g["equal_sets"].as_u64().expect("eq"),
    );
    assert!(sets >= 3 * 16 && equal * 100 >= sets * 95, "{g}");
    let notes = v["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("routing agreement:"))),
        "{notes:?}"
    );
}

/// The rows of a step ledger's two measurements every decode-step test checks: the workload,
/// the graph cross-check (every expected count found), the replay validations and probes.
fn check_step_measurements(out: &Path, files: [&str; 2], depth: u64) {
    for f in files {
        let text = std::fs::read_to_string(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let m: serde_json::Value = serde_json::from_str(&text).expect("measurement json");
        assert_eq!(
            (m["n_tokens"].as_u64(), m["n_past"].as_u64()),
            (Some(1), Some(depth)),
            "{f}"
        );
        let g = &m["graph"];
        assert_eq!(g["n_past"].as_u64(), Some(depth), "{f}");
        let expected = g["expected"].as_array().expect("expected counts");
        assert!(
            expected.len() >= 10,
            "{f}: {} expected counts",
            expected.len()
        );
        for e in expected {
            assert_eq!(e["ok"], true, "{f}: {e}");
        }
        for what in ["embedding", "moe_gate_up", "moe_down"] {
            assert!(
                expected.iter().any(|e| e["category"] == what),
                "{f}: no {what} check"
            );
        }
        // One embedding lookup for the one-token batch.
        let emb = expected
            .iter()
            .find(|e| e["category"] == "embedding")
            .expect("embedding check");
        assert_eq!(emb["found"], 1, "{f}");
        let r = &m["replay"];
        assert_eq!(r["n_past"].as_u64(), Some(depth), "{f}");
        for v in ["all_at_once", "sum_of_parts", "linearity", "digest"] {
            assert!(r["validations"][v]["pass"].is_boolean(), "{f}: {v} not run");
        }
        // Every run restored the same context: the step's logits never changed.
        assert_eq!(r["validations"]["digest"]["pass"], true, "{f}");
        assert_eq!(m["probe"]["complete"], true, "{f}");
        assert!(m["probe"]["runs_checked"].as_u64() > Some(20), "{f}");
    }
}

fn step_ledger(model: &Path, peer: &str, out: &Path) -> Output {
    tally(&[
        "ledger",
        "--model",
        &model.to_string_lossy(),
        "--peer",
        peer,
        "--step-at",
        "16",
        "-t",
        "1",
        "-r",
        "3",
        "--op-reps",
        "3",
        "--busy-limit",
        "64",
        "--out-dir",
        &out.to_string_lossy(),
    ])
}

fn check_step_headline(o: &Output) {
    // 3: no verdict on a loaded machine (the reports are still written).
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("Ledger step-d16 (decode step at depth 16): A = tally@"),
        "{stdout}"
    );
    assert!(stdout.contains("decode step at depth 16: A "), "{stdout}");
    assert_eq!(
        o.status.code() == Some(3),
        stdout.contains("Verdict: NO VERDICT"),
        "{stdout}"
    );
    assert!(stdout.contains("End-to-end step: A "), "{stdout}");
    assert!(stdout.contains("A replay: "), "{stdout}");
}

#[test]
fn ledger_of_one_decode_step_against_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "s.gguf", &[]);
    let out = dir.path().join("out");
    let o = step_ledger(&p, "self", &out);
    check_step_headline(&o);
    for f in [
        "ledger-step-d16.md",
        "ledger-step-d16.json",
        "ledger-step-d16.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    assert!(!out.join("ledger-pp512.md").exists());
    check_step_measurements(
        &out,
        [
            "tally-cpu-step-d16.measurement.json",
            "self-cpu-step-d16.measurement.json",
        ],
        16,
    );
    let l: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("ledger-step-d16.json")).expect("ledger json"),
    )
    .expect("json");
    assert_eq!(
        (l["n_tokens"].as_u64(), l["n_past"].as_u64()),
        (Some(1), Some(16))
    );
}

/// One decode step against the real peer, when this build has it.
#[cfg(feature = "llama")]
#[test]
fn ledger_of_one_decode_step_against_llama_cpp_on_the_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "sp.gguf", &[]);
    let out = dir.path().join("out");
    let o = step_ledger(&p, "llama.cpp", &out);
    check_step_headline(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("B = llama.cpp@"));
    assert!(out.join("ledger-step-d16.svg").exists());
    check_step_measurements(
        &out,
        [
            "tally-cpu-step-d16.measurement.json",
            "llama.cpp-cpu-step-d16.measurement.json",
        ],
        16,
    );
}

/// Copies a GGUF, letting `edit` change the tensor list (names, dims; same bytes per tensor).
fn rewrite(src: &Path, dst: &Path, edit: impl Fn(&mut TensorSpec)) {
    let g = tally_gguf::GgufFile::open(src).expect("open");
    let specs: Vec<TensorSpec> = g
        .tensors()
        .iter()
        .map(|t| {
            let mut s = TensorSpec {
                name: t.name.clone(),
                dims: t.dims.clone(),
                ty: t.ty,
            };
            edit(&mut s);
            s
        })
        .collect();
    let f = std::fs::File::create(dst).expect("create");
    let mut w = GgufWriter::new(f, g.metadata(), &specs).expect("writer");
    for t in g.tensors() {
        w.write_data(g.tensor_data(t)).expect("data");
    }
    w.finish().expect("finish");
}

#[test]
fn info_describes_trunk_mtp_and_types() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = synth(dir.path(), "mtp.gguf", &["--mtp"]);
    let ps = p.to_string_lossy().into_owned();
    let o = tally(&["info", "--model", &ps]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "block_count 5 = 4 trunk (3 linear, 1 full attention) + 1 MTP",
        "Q8_0",
        "MTP block blk.4",
        "not used by plain decoding",
        "tokenizer: none",
        "chat template: absent",
    ] {
        assert!(out.contains(want), "info lacks `{want}`:\n{out}");
    }
    let o = tally(&["info", "--model", &ps, "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["architecture"], "qwen35moe");
    assert_eq!(v["trunk_layers"], 4);
    assert_eq!(v["mtp_layers"], 1);
    assert_eq!(v["block_count"], 5);
    assert_eq!(v["types"]["Q8_0"]["bits_per_weight"], 8.5);
    assert_eq!(v["types"]["F32"]["bits_per_weight"], 32.0);
    assert_eq!(v["tokenizer"]["model"], "none");
    assert!(v["chat_template_bytes"].is_null());
    assert_eq!(v["unused_tensors"].as_array().map(Vec::len), Some(0));
}

#[test]
fn info_on_a_bad_file_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("x.gguf");
    std::fs::write(&p, b"GGUF but then nothing sensible").expect("write");
    let o = tally(&["info", "--model", &p.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn mtp_file_runs_the_trunk_like_its_twin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = synth(dir.path(), "plain.gguf", &[]);
    let mtp = synth(dir.path(), "mtp.gguf", &["--mtp"]);
    let run = |p: &Path| {
        let o = tally(&[
            "run",
            "--model",
            &p.to_string_lossy(),
            "--tokens",
            "6",
            "-n",
            "3",
            "-o",
            "json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        (v["decoded"].clone(), v["top_logits"].clone())
    };
    let a = run(&plain);
    assert!(
        a.0.is_array() && a.1.is_array(),
        "run -o json has `decoded`, `top_logits`"
    );
    assert_eq!(a, run(&mtp));
}

#[test]
fn broken_mtp_tensor_is_bad_input_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = synth(dir.path(), "mtp.gguf", &["--mtp"]);
    // eh_proj [2d, d] spelled [d, 2d]: same bytes, wrong shape.
    let bad = dir.path().join("bad-shape.gguf");
    rewrite(&src, &bad, |s| {
        if s.name == "blk.4.nextn.eh_proj.weight" {
            s.dims.swap(0, 1);
        }
    });
    let o = tally(&["run", "--model", &bad.to_string_lossy(), "--tokens", "4"]);
    assert_bad_input(
        &o,
        "tensor `blk.4.nextn.eh_proj.weight` has shape [256, 512]",
    );
    let o = tally(&["info", "--model", &bad.to_string_lossy()]);
    assert_bad_input(&o, "blk.4.nextn.eh_proj.weight");
    // A required MTP tensor renamed away is missing.
    let gone = dir.path().join("missing.gguf");
    rewrite(&src, &gone, |s| {
        if s.name == "blk.4.nextn.hnorm.weight" {
            s.name = "blk.4.nextn.hnorm_x.weight".into();
        }
    });
    let o = tally(&["run", "--model", &gone.to_string_lossy(), "--tokens", "4"]);
    assert_bad_input(&o, "missing tensor `blk.4.nextn.hnorm.weight`");
}

#[test]
fn info_reads_a_converter_files_real_metadata() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/converter/conv-a-mtp-q8_0.gguf");
    let o = tally(&["info", "--model", &p.to_string_lossy(), "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["tokenizer"]["model"], "gpt2");
    assert_eq!(v["tokenizer"]["pre"], "qwen35");
    assert_eq!(v["tokenizer"]["tokens"], 320);
    assert!(v["tokenizer"]["merges"].as_u64().is_some_and(|n| n > 0));
    assert!(v["chat_template_bytes"].as_u64().is_some_and(|n| n > 0));
    assert!(v["size_label"].is_string() && v["name"].is_string());
    assert_eq!(v["file_type"], 7); // llama.cpp's MOSTLY_Q8_0
    assert_eq!(
        (v["trunk_layers"].as_u64(), v["mtp_layers"].as_u64()),
        (Some(4), Some(1))
    );
    assert!(
        v["types"]["Q8_0"]["tensors"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    let o = tally(&["info", "--model", &p.to_string_lossy()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("tokenizer: gpt2 (320 tokens, pre-tokenizer qwen35)"),
        "{out}"
    );
    assert!(out.contains("chat template: present"), "{out}");
}

/// `tally run --routing`: each MoE layer's spread of the prompt over the experts, with the
/// counts a router must give (every row routed to k distinct experts) and the plan's pruning of
/// the last layer to the logit row, beside a uniform table of as many tokens.
#[test]
fn run_reports_the_routing_of_each_moe_layer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synth(dir.path(), "t.gguf", &[])
        .to_string_lossy()
        .into_owned();
    // With --routing-table: the median whole-prompt layer's table (by busiest expert) as text,
    // checked below against the JSON's layers.
    let table = dir.path().join("routing.txt");
    let o = tally(&[
        "run",
        "--model",
        &m,
        "--tokens",
        "40",
        "--routing",
        "--routing-table",
        &table.to_string_lossy(),
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let r = &j["routing"];
    let (e, k) = (r["experts"].as_u64(), r["experts_per_token"].as_u64());
    assert_eq!((e, k), (Some(8), Some(2)), "{r}");
    let layers = r["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 4, "one top-k node a layer: {r}");
    let pairs = |l: &serde_json::Value| {
        let touched = l["experts_touched"].as_f64().expect("touched");
        (touched * l["mean_rows_per_touched"].as_f64().expect("mean")).round() as u64
    };
    for (i, l) in layers.iter().enumerate() {
        // Every layer but the last routes all 40 rows; the last only the logit row's.
        let want = if i + 1 < layers.len() { 80 } else { 2 };
        assert_eq!(pairs(l), want, "layer {i}: {l}");
        let (touched, max) = (l["experts_touched"].as_u64(), l["max_rows"].as_u64());
        assert!(touched.is_some_and(|t| (2..=8).contains(&t)), "{l}");
        // k distinct experts a row: no expert holds more rows than there are tokens.
        assert!(
            max.is_some_and(|m| m >= 1 && m <= if i + 1 < layers.len() { 40 } else { 1 }),
            "{l}"
        );
        assert!(l["tiles32"].as_u64() >= touched, "{l}");
    }
    assert_eq!(pairs(&r["uniform"]), 80, "{r}");
    let text = std::fs::read_to_string(&table).expect("table written");
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    assert_eq!(lines.next(), Some("40 2 8"), "{text}");
    let mut counts = [0u64; 8];
    let mut rows = 0;
    for l in lines {
        let ids: Vec<usize> = l.split(' ').map(|x| x.parse().expect("an id")).collect();
        assert!(
            ids.len() == 2 && ids[0] != ids[1] && ids.iter().all(|&e| e < 8),
            "{l}"
        );
        ids.iter().for_each(|&e| counts[e] += 1);
        rows += 1;
    }
    assert_eq!(rows, 40);
    let mut maxes: Vec<u64> = layers[..layers.len() - 1]
        .iter()
        .map(|l| l["max_rows"].as_u64().expect("max"))
        .collect();
    maxes.sort_unstable();
    let median = maxes[(maxes.len() - 1) / 2];
    assert_eq!(counts.iter().max(), Some(&median), "{text}");
    assert!(
        text.contains(&format!("busiest expert: {median} rows")),
        "{text}"
    );
    // Without --routing it is refused (exit 2).
    let o = tally(&[
        "run",
        "--model",
        &m,
        "--tokens",
        "4",
        "--routing-table",
        "x.txt",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--routing"), "{}", stderr(&o));
    // Text: a row per layer and the uniform one.
    let o = tally(&["run", "--model", &m, "--tokens", "40", "--routing"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("routing of the prompt (8 experts, 2 a token)") && out.contains("uniform"),
        "{out}"
    );
    // A file made by llama.cpp's converter (conv-a: 4 layers, 4 experts top-2; with its MTP
    // block, whose top-k the trunk's prefill does not run).
    let conv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/converter/conv-a-mtp-q8_0.gguf");
    let c = conv.to_string_lossy();
    let o = tally(&[
        "run",
        "--model",
        &c,
        "--tokens",
        "40",
        "--routing",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let r = &j["routing"];
    let ek = (r["experts"].as_u64(), r["experts_per_token"].as_u64());
    assert_eq!(ek, (Some(4), Some(2)), "{r}");
    let layers = r["layers"].as_array().expect("layers");
    let got: Vec<u64> = layers.iter().map(pairs).collect();
    assert_eq!(got, [80, 80, 80, 2], "{r}");
}
