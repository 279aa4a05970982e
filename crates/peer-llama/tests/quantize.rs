//! tally against llama.cpp's own quantiser: every file here is written by `llama_model_quantize`
//! (what `llama-quantize` runs, without an importance matrix), from float files made by llama.cpp's
//! converter (the fixtures of crates/engine/tests/fixtures/converter) and by `tally synth`, in each
//! of the file types `tally synth --quant` knows. For each output file:
//!
//! 1. **the recipe:** every tensor's type is the one tally's mix gives it
//!    ([`QuantMix::tensor_type`], which `tally synth` writes): llama.cpp is the oracle for which
//!    tensor gets which type (layer rules, the 8-expert and GQA rules, MTP blocks, the block-size
//!    fallbacks);
//! 2. **the blocks:** every tensor decoded by tally's CPU dequantiser equals ggml's own `to_float`
//!    bit for bit, on blocks ggml's quantiser chose (its scale searches, not ours);
//! 3. **the file:** tally loads it and its CPU logits agree with llama.cpp's on the same file
//!    (the bound allows for llama.cpp quantising activations to 8 bits in its CPU matmuls; a
//!    layout or decoding mismatch gives uncorrelated logits, relative error near 1.4).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tally_gguf::{GgmlType, GgufFile, dequantize_row};
use tally_model::synth::{Preset, QuantMix, RecipeFacts, SynthSpec, apply_overrides, write_model};
use tally_peer_llama::{LlamaPeer, dequantize, quantize_file};

mod common;
use common::{converter_fixture, cpu_logits, params, rel_err};

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tally-quantize-{}-{name}", std::process::id()))
}

/// A `tally synth` file whose matrices are BF16 (llama.cpp quantises from any float type).
fn synth_bf16(preset: Preset, overrides: &[&str], tag: &str) -> PathBuf {
    synth_bf16_mtp(preset, overrides, 0, tag)
}

/// As [`synth_bf16`], with `mtp` MTP blocks (`tally synth --mtp`).
fn synth_bf16_mtp(preset: Preset, overrides: &[&str], mtp: usize, tag: &str) -> PathBuf {
    let mut cfg = preset.config();
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    apply_overrides(&mut cfg, &o).unwrap();
    cfg.n_mtp_layers = mtp;
    let path = temp(&format!("{tag}-bf16.gguf"));
    let spec = SynthSpec {
        preset,
        config: cfg,
        quant: QuantMix::Bf16,
        seed: 3,
        fill: Default::default(),
    };
    let out = BufWriter::new(File::create(&path).unwrap());
    write_model(&spec, out, &mut |_, _| {}).unwrap();
    path
}

/// tally's logits against llama.cpp's on the same quantised file: the engines decode the same
/// blocks, and llama.cpp's CPU matmuls round activations to 8 bits (measured: 0.002-0.020
/// relative).
const LLAMA_BOUND: f64 = 0.05;
/// tally's logits on a quantised file against its logits on the float source: the quantisation
/// error itself, which random weights make large (measured: 0.004 for bf16 up to 0.45 for
/// Q2_K). Logits that share nothing give sqrt(2) = 1.41, so a misread layout still fails.
const FLOAT_SOURCE_BOUND: f64 = 0.7;

/// The 16 types tally computes with (README), listed here rather than asked of tally.
const SUPPORTED: [&str; 16] = [
    "F32", "F16", "BF16", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_XS", "IQ4_NL",
    "MXFP4", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
];

/// Decodes every non-F32 tensor of `file` with tally's CPU dequantiser and with ggml's
/// `to_float`; a value whose bits differ (NaN payloads aside) is a failure. Returns the values
/// decoded.
fn check_blocks(file: &GgufFile, what: &str, failures: &mut Vec<String>) -> usize {
    let mut decoded = 0usize;
    for t in file.tensors().iter().filter(|t| t.ty != GgmlType::F32) {
        let n = t.n_elems() as usize;
        let data = file.tensor_data(t);
        let theirs = match dequantize(t.ty.id(), data, n) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{what}: {}: ggml: {e}", t.name));
                continue;
            }
        };
        let mut ours = vec![f32::NAN; n];
        if let Err(e) = dequantize_row(t.ty, data, &mut ours) {
            failures.push(format!("{what}: {}: tally: {e}", t.name));
            continue;
        }
        let differ = ours
            .iter()
            .zip(&theirs)
            .filter(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()))
            .count();
        if differ > 0 {
            failures.push(format!(
                "{what}: {} ({}): {differ} of {n} values differ from ggml's to_float",
                t.name, t.ty
            ));
        }
        decoded += n;
    }
    decoded
}

/// Quantises `src` into every mix and checks the three points of the module doc. Prints a line
/// per file; panics with all the failures at once.
fn check_source(src: &Path, tag: &str, llama_loads: bool) {
    let src_model = Arc::new(tally_model::Model::open(src).unwrap());
    // The facts llama.cpp's recipe reads, from the source file itself.
    let src_facts = RecipeFacts::of(&src_model.config);
    let tokens = tally_ledger::rng::prompt_tokens(12, src_model.config.vocab as u32, 7).unwrap();
    let float_logits = cpu_logits(src_model, &tokens);
    if !llama_loads {
        // The reason this source is not compared with llama.cpp must hold: its loader refuses
        // the float file itself, not only what its quantiser wrote.
        let e = LlamaPeer::load(src, params()).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.to_string().contains("wrong shape")),
            "{tag}: expected llama.cpp's loader to refuse the source (wrong shape), got {e:?}"
        );
    }
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for name in QuantMix::NAMES {
        let mix = QuantMix::parse(name).unwrap();
        let out = temp(&format!("{tag}-{name}.gguf"));
        if let Err(e) = quantize_file(src, &out, mix.file_type(), 1) {
            failures.push(format!("{tag} {name}: llama.cpp could not quantise: {e}"));
            continue;
        }
        let file = GgufFile::open(&out).unwrap();

        // 1. The recipe.
        let mut types = std::collections::BTreeMap::<String, usize>::new();
        for t in file.tensors() {
            *types.entry(t.ty.name().to_string()).or_default() += 1;
            let want = mix.tensor_type(&t.name, &t.dims, src_facts);
            // What llama.cpp leaves unquantised keeps the source's type (F32 in these sources).
            if t.ty != want {
                failures.push(format!(
                    "{tag} {name}: {} {:?}: llama.cpp wrote {}, tally's mix says {}",
                    t.name, t.dims, t.ty, want
                ));
            }
        }

        // 2. The blocks.
        let decoded = check_blocks(&file, &format!("{tag} {name}"), &mut failures);

        // 3. The file: tally loads it, and its logits agree with llama.cpp's on the same file
        //    (where this llama.cpp loads the source) and with tally's on the float source.
        let model = match tally_model::Model::open(&out) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                failures.push(format!("{tag} {name}: tally cannot load it: {e}"));
                continue;
            }
        };
        let ours = cpu_logits(model, &tokens);
        let err_src = rel_err(&ours, &float_logits);
        if ours.len() != float_logits.len() || err_src >= FLOAT_SOURCE_BOUND {
            failures.push(format!(
                "{tag} {name}: tally's logits on it vs on the float source: rel err {err_src:.4}"
            ));
        }
        let err_llama = if llama_loads {
            let theirs = match LlamaPeer::load(&out, params()) {
                Ok(mut p) => p.prefill_logits(&tokens).unwrap(),
                Err(e) => {
                    failures.push(format!(
                        "{tag} {name}: llama.cpp cannot load its own file: {e}"
                    ));
                    continue;
                }
            };
            let err = rel_err(&ours, &theirs);
            if ours.len() != theirs.len()
                || !theirs.iter().all(|v| v.is_finite())
                || err >= LLAMA_BOUND
            {
                failures.push(format!(
                    "{tag} {name}: tally vs llama.cpp logits: rel err {err:.4} ({} vs {} values)",
                    ours.len(),
                    theirs.len()
                ));
            }
            format!("{err:.4}")
        } else {
            "-".to_string()
        };
        let _ = std::fs::remove_file(&out);
        let mix_desc: Vec<String> = types.iter().map(|(t, c)| format!("{c} {t}")).collect();
        report.push(format!(
            "{tag:14} {name:9} {decoded:>8} values decoded bit for bit; logits rel err vs llama.cpp {err_llama}, vs the float source {err_src:.4}; {}",
            mix_desc.join(", ")
        ));
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The converter's float files: hidden size 32, so every K-quant and IQ4_XS row falls back
/// (llama.cpp's `tensor_type_fallback`), 4, 6 and 8 experts, GQA 4 and 1, MTP blocks.
#[test]
fn converter_files_quantised_by_llama_cpp() {
    check_source(&converter_fixture("conv-a-f32.gguf"), "conv-a-f32", true);
    // This llama.cpp's loader refuses conv-b (2 key heads to 6 value heads: it sizes attn_qkv
    // for another ratio), so its files are compared with tally's logits on the float source only.
    check_source(&converter_fixture("conv-b-f32.gguf"), "conv-b-f32", false);
    check_source(&converter_fixture("conv-c-f32.gguf"), "conv-c-f32", true);
}

/// The converter's files with an MTP block (llama.cpp counts it in `n_layer`).
#[test]
fn converter_mtp_files_quantised_by_llama_cpp() {
    check_source(
        &converter_fixture("conv-a-mtp-f32.gguf"),
        "conv-a-mtp-f32",
        true,
    );
    // Refused by this llama.cpp's loader as conv-b is (1 key head to 4 value heads).
    check_source(
        &converter_fixture("conv-d-mtp-f32.gguf"),
        "conv-d-mtp-f32",
        false,
    );
}

/// 16 blocks (llama.cpp's layer rules: n/16, n/8, 7n/8 and every third), 4 experts, GQA 8,
/// rows of 256 (no fallback).
#[test]
fn synth_16_layers_quantised_by_llama_cpp() {
    let src = synth_bf16(Preset::Tiny, &["n_layers=16", "n_experts=4"], "l16");
    check_source(&src, "synth-l16", true);
    let _ = std::fs::remove_file(&src);
}

/// The tiny preset as it is (8 experts: llama.cpp's 8-expert rules), and the odd one (GQA 2,
/// expert rows of 96: fallbacks on the downs only).
#[test]
fn synth_presets_quantised_by_llama_cpp() {
    let src = synth_bf16(Preset::Tiny, &[], "tiny");
    check_source(&src, "synth-tiny", true);
    let _ = std::fs::remove_file(&src);
    let src = synth_bf16(Preset::TinyOdd, &["expert_ffn=96"], "odd");
    check_source(&src, "synth-odd", true);
    let _ = std::fs::remove_file(&src);
}

/// `tally synth --mtp` (the converter's MTP layout, which llama.cpp's quantiser counts in
/// n_layer) through llama.cpp's quantiser and loader.
#[test]
fn synth_mtp_quantised_by_llama_cpp() {
    let src = synth_bf16_mtp(Preset::Tiny, &["n_experts=4"], 1, "mtp");
    check_source(&src, "synth-mtp", true);
    let _ = std::fs::remove_file(&src);
}

/// A file llama.cpp's quantiser writes in a type tally does not compute with (IQ3_M: IQ3_S
/// blocks, no importance matrix needed) is refused before anything loads, every offending tensor
/// named with its type (the CLI maps the error to exit code 2: crates/tally/tests/cli.rs).
#[test]
fn unsupported_types_from_llama_cpps_quantiser_are_all_named() {
    const LLAMA_FTYPE_MOSTLY_IQ3_M: u32 = 27;
    let src = synth_bf16(Preset::Tiny, &[], "unsupported");
    let out = temp("unsupported-iq3_m.gguf");
    quantize_file(&src, &out, LLAMA_FTYPE_MOSTLY_IQ3_M, 1).unwrap();
    let file = GgufFile::open(&out).unwrap();
    let bad: Vec<String> = file
        .tensors()
        .iter()
        .filter(|t| !SUPPORTED.contains(&t.ty.name()))
        .map(|t| format!("{} {}", t.name, t.ty.name()))
        .collect();
    assert!(
        bad.len() > 10 && bad.iter().all(|b| b.ends_with(" IQ3_S")),
        "expected IQ3_S tensors (only) in llama.cpp's IQ3_M file: {bad:?}"
    );
    let err = match tally_model::Model::open(&out) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("tally loaded a file with {} unsupported tensors", bad.len()),
    };
    for b in &bad {
        assert!(
            err.contains(b.as_str()),
            "the error does not name `{b}`: {err}"
        );
    }
    assert!(err.contains(&format!("({} tensor(s))", bad.len())), "{err}");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&src);
}

/// Every type tally computes with, as ggml's quantiser writes it (its own file types, beyond
/// the 11 mixes: F16, Q4_1, Q5_0, Q5_1 and the K_S mixes), decodes as ggml's `to_float` does,
/// bit for bit, and each file runs on tally's CPU as on llama.cpp's. The union of the types met
/// must be all 16.
#[test]
fn every_supported_type_decodes_as_ggml_does() {
    // llama.cpp's ftype numbers: F16, Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K_S, Q4_K_S,
    // Q5_K_S, Q6_K, IQ4_NL, IQ4_XS, BF16, MXFP4_MOE.
    const FTYPES: [u32; 15] = [1, 2, 3, 7, 8, 9, 10, 11, 14, 16, 18, 25, 30, 32, 38];
    let src = synth_bf16(Preset::Tiny, &["n_experts=4"], "types");
    let src_model = Arc::new(tally_model::Model::open(&src).unwrap());
    let tokens = tally_ledger::rng::prompt_tokens(12, src_model.config.vocab as u32, 9).unwrap();
    drop(src_model);
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for ftype in FTYPES {
        let out = temp(&format!("types-{ftype}.gguf"));
        quantize_file(&src, &out, ftype, 1).unwrap();
        let file = GgufFile::open(&out).unwrap();
        seen.extend(file.tensors().iter().map(|t| t.ty.name()));
        check_blocks(&file, &format!("ftype {ftype}"), &mut failures);
        let theirs = LlamaPeer::load(&out, params())
            .unwrap()
            .prefill_logits(&tokens)
            .unwrap();
        let ours = cpu_logits(Arc::new(tally_model::Model::open(&out).unwrap()), &tokens);
        let err = rel_err(&ours, &theirs);
        if err >= LLAMA_BOUND {
            failures.push(format!(
                "ftype {ftype}: tally vs llama.cpp logits rel err {err:.4}"
            ));
        }
        let _ = std::fs::remove_file(&out);
    }
    let _ = std::fs::remove_file(&src);
    let missing: Vec<&str> = SUPPORTED
        .iter()
        .copied()
        .filter(|t| !seen.contains(t))
        .collect();
    assert!(
        missing.is_empty(),
        "types no file had: {missing:?} (seen {seen:?})"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The oracles' own bad inputs are errors that say what is wrong, not crashes.
#[test]
fn the_oracles_refuse_bad_input() {
    let missing = temp("no-such-file.gguf");
    let e = quantize_file(&missing, &temp("never-written.gguf"), 15, 1).unwrap_err();
    assert!(
        e.to_string().contains("llama_model_quantize") && e.to_string().contains("returned 1"),
        "{e}"
    );
    let e = quantize_file(
        &converter_fixture("conv-a-f32.gguf"),
        &temp("never-written.gguf"),
        9999,
        1,
    )
    .unwrap_err();
    assert!(e.to_string().contains("ftype 9999"), "{e}");
    // Q8_0: 34-byte blocks of 32 values.
    assert!(dequantize(GgmlType::Q8_0.id(), &[0; 34], 32).is_ok());
    let e = dequantize(GgmlType::Q8_0.id(), &[0; 33], 32).unwrap_err();
    assert!(e.to_string().contains("take 34 bytes, got 33"), "{e}");
    let e = dequantize(GgmlType::Q8_0.id(), &[0; 34], 31).unwrap_err();
    assert!(e.to_string().contains("not whole 32-element blocks"), "{e}");
    let e = dequantize(GgmlType::F32.id(), &[0; 4], 1).unwrap_err();
    assert!(e.to_string().contains("no to_float"), "{e}");
    let e = dequantize(4096, &[], 0).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}
