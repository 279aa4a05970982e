//! Files made by llama.cpp's own converter (`convert_hf_to_gguf.py`) from random transformers
//! `Qwen3_5MoeForCausalLM` checkpoints, against transformers' float64 logits of the same
//! checkpoint (tools/convert/make_fixtures.py; the fixtures and their README are in
//! tests/fixtures/converter/). The checkpoint is the truth and the converter's file is what
//! tally loads: nothing is undone in between, so these tests hold tally's reading of the
//! converter's layout (norm + 1, V-head reordering, `[d, 1]` vectors, the MTP block...).
//!
//! conv-a, conv-b and conv-a-mtp have head dims (8, 16) below what the CUDA kernels run; conv-c
//! (the real model's head dims) and conv-d-mtp (the other supported dims) are the ones
//! `scripts/gpu/converter.sh` expects to pass on CUDA, and `new_fixtures_use_dims_cuda_runs` holds
//! them to those dims.
//!
//! Bounds, relative error in f64 over each logits vector (measured worst over the prompt and 8
//! greedy steps of every fixture, in the fixtures' README):
//! - f32 files: 1e-5. The converter stores the checkpoint's f32 weights exactly; what remains is
//!   tally's f32 arithmetic against float64 (measured ~2e-7).
//! - bf16 files: 2e-2. Every matrix is rounded to 8 significant bits (relative error up to
//!   2^-9 per weight, ~2^-10 RMS); through ~a dozen matmuls between embedding and head that
//!   becomes 4e-3 to 7e-3 on the logits.
//! - q8_0 files: 4e-2. Blocks of 32 weights share one scale, absmax / 127: a weight's error is
//!   up to half a step, ~0.5% RMS of a Gaussian block, the embedding and head included
//!   (the converter quantises both); measured 1.3e-2 to 1.9e-2 on the logits.
//!
//! Greedy tokens must be identical in every case: the reference was drawn (seeds tried in order)
//! until every greedy step has a top-1 to top-2 logit gap of at least 0.05 and every router the
//! k-th to (k+1)-th logit gap of at least 0.02 (logits of unit scale), several times the
//! quantised files' errors.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use sha2::{Digest, Sha256};
use tally_gguf::{GgmlType, GgufFile};
use tally_model::Model;

const F32_TOL: f64 = 1e-5;
const BF16_TOL: f64 = 2e-2;
const Q8_0_TOL: f64 = 4e-2;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/converter")
        .join(name)
}

struct Reference {
    file: GgufFile,
}

impl Reference {
    fn open(name: &str) -> Reference {
        let path = fixture(&format!("{name}.ref.gguf"));
        Reference {
            file: GgufFile::open(&path).expect("reference file"),
        }
    }
    fn tensor<T>(&self, name: &str, ty: GgmlType, f: fn([u8; 4]) -> T) -> Vec<T> {
        let t = self
            .file
            .tensor(name)
            .unwrap_or_else(|| panic!("reference lacks {name}"));
        assert_eq!(t.ty, ty, "{name}");
        self.file
            .tensor_data(t)
            .chunks_exact(4)
            .map(|b| f([b[0], b[1], b[2], b[3]]))
            .collect()
    }
    fn ids(&self, name: &str) -> Vec<u32> {
        self.tensor(name, GgmlType::I32, |b| i32::from_le_bytes(b) as u32)
    }
    fn logits(&self, step: usize) -> Vec<f32> {
        self.tensor(&format!("logits.{step}"), GgmlType::F32, f32::from_le_bytes)
    }
    fn sha(&self, outtype: &str) -> String {
        let key = format!("reference.sha256.{outtype}");
        self.file
            .get(&key)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("reference lacks {key}"))
            .to_string()
    }
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

/// Runs the reference's prompt and greedy continuation through the CPU backend on the converted
/// file; returns the worst relative logits error. Asserts the bound and every greedy token.
fn check(name: &str, outtype: &str, tol: f64) -> f64 {
    let r = Reference::open(name);
    let path = fixture(&format!("{name}-{outtype}.gguf"));
    let sha = format!(
        "{:x}",
        Sha256::digest(std::fs::read(&path).expect("read fixture"))
    );
    assert_eq!(
        sha,
        r.sha(outtype),
        "{name}-{outtype}: not the file the reference was made with; regenerate the fixtures \
         (tests/fixtures/converter/README.md)"
    );
    let model = Arc::new(Model::open(&path).expect("open converter file"));
    let prompt = r.ids("prompt_ids");
    let greedy = r.ids("greedy_ids");
    let mut s = session(&model, prompt.len() + greedy.len() + 1);
    let mut logits = s.prefill(&prompt).expect("prefill");
    let mut worst = 0.0f64;
    for (step, &want_id) in greedy.iter().enumerate() {
        let e = rel_err(&logits, &r.logits(step));
        worst = worst.max(e);
        assert!(
            e < tol,
            "{name}-{outtype} step {step}: logits rel err {e:.3e} >= {tol:.0e}"
        );
        assert!(all_finite(&logits));
        let got = argmax(&logits);
        assert_eq!(got, want_id, "{name}-{outtype}: greedy token {step}");
        logits = s.decode(got).expect("decode");
    }
    let e = rel_err(&logits, &r.logits(greedy.len()));
    worst = worst.max(e);
    assert!(e < tol, "{name}-{outtype} last step: rel err {e:.3e}");
    eprintln!(
        "{name}-{outtype}: worst logits rel err {worst:.2e} over the prompt and {} greedy steps",
        greedy.len()
    );
    worst
}

#[test]
fn conv_a_f32_matches_transformers() {
    check("conv-a", "f32", F32_TOL);
}

#[test]
fn conv_a_q8_0_and_bf16_give_the_same_tokens() {
    check("conv-a", "q8_0", Q8_0_TOL);
    check("conv-a", "bf16", BF16_TOL);
}

#[test]
fn conv_b_f32_matches_transformers() {
    check("conv-b", "f32", F32_TOL);
}

#[test]
fn conv_b_q8_0_and_bf16_give_the_same_tokens() {
    check("conv-b", "q8_0", Q8_0_TOL);
    check("conv-b", "bf16", BF16_TOL);
}

/// The MTP twin has conv-a's trunk (same seed) and one random MTP block: the trunk alone runs,
/// so its logits are transformers' (which ignores `mtp.*`) to the same bound.
#[test]
fn conv_a_mtp_runs_the_trunk_and_keeps_the_block() {
    check("conv-a-mtp", "f32", F32_TOL);
    check("conv-a-mtp", "q8_0", Q8_0_TOL);
    check("conv-a-mtp", "bf16", BF16_TOL);
    let m = Model::open(&fixture("conv-a-mtp-f32.gguf")).expect("open");
    let twin = Model::open(&fixture("conv-a-f32.gguf")).expect("open twin");
    assert_eq!(m.config.n_mtp_layers, 1);
    assert_eq!(m.config.n_layers, twin.config.n_layers);
    assert_eq!(m.config.layers, twin.config.layers);
    assert!(twin.mtp.is_empty());
    let [mtp] = m.mtp.as_slice() else {
        panic!("one MTP block expected, got {}", m.mtp.len())
    };
    let l = m.config.n_layers;
    assert_eq!(mtp.layer, l);
    // The converter maps mtp.norm to shared_head_norm; the checkpoint has no MTP embedding or head.
    assert!(mtp.own_head_norm && !mtp.own_embed_tokens && !mtp.own_head);
    let d = m.config.hidden as u64;
    let eh = mtp
        .tensors
        .iter()
        .find(|t| t.name == format!("blk.{l}.nextn.eh_proj.weight"))
        .expect("eh_proj kept");
    assert_eq!(eh.dims, vec![2 * d, d]);
    // Converter spelling [d, 1] is read as the loader's [d].
    let g = mtp
        .tensors
        .iter()
        .find(|t| t.name == format!("blk.{l}.ffn_gate_inp_shexp.weight"))
        .expect("shared gate kept");
    assert_eq!(g.dims, vec![d]);
}

#[test]
fn conv_c_f32_matches_transformers() {
    check("conv-c", "f32", F32_TOL);
}

#[test]
fn conv_c_q8_0_and_bf16_give_the_same_tokens() {
    check("conv-c", "q8_0", Q8_0_TOL);
    check("conv-c", "bf16", BF16_TOL);
}

/// conv-d-mtp has no plain twin (to keep the fixtures small): the trunk's logits are held to
/// transformers' directly, and the MTP block is checked as it is for conv-a-mtp.
#[test]
fn conv_d_mtp_runs_the_trunk_and_keeps_the_block() {
    check("conv-d-mtp", "f32", F32_TOL);
    check("conv-d-mtp", "q8_0", Q8_0_TOL);
    check("conv-d-mtp", "bf16", BF16_TOL);
    for outtype in ["f32", "q8_0", "bf16"] {
        let m = Model::open(&fixture(&format!("conv-d-mtp-{outtype}.gguf"))).expect("open");
        assert_eq!(m.config.n_layers, 2);
        assert_eq!(m.config.n_mtp_layers, 1);
        let [mtp] = m.mtp.as_slice() else {
            panic!("one MTP block expected, got {}", m.mtp.len())
        };
        assert_eq!(mtp.layer, 2);
        assert!(mtp.own_head_norm && !mtp.own_embed_tokens && !mtp.own_head);
        let d = m.config.hidden as u64;
        let eh = mtp
            .tensors
            .iter()
            .find(|t| t.name == "blk.2.nextn.eh_proj.weight")
            .expect("eh_proj kept");
        assert_eq!(eh.dims, vec![2 * d, d], "{outtype}");
        let experts = mtp
            .tensors
            .iter()
            .find(|t| t.name == "blk.2.ffn_gate_exps.weight")
            .expect("MTP experts kept");
        assert_eq!(experts.dims[2], 8, "{outtype}: the MTP block's experts");
    }
}

/// The new fixtures exist to run on the CUDA backend: their head dims are ones its kernels
/// take (attention 32/64/128/256; delta rule key 64/128, value 32..128 in steps of 32). A
/// regenerated fixture that lost them would quietly stop covering the GPU.
#[test]
fn new_fixtures_use_dims_cuda_runs() {
    // (name, heads q:kv, head dim, rotary dims, delta-rule heads k:v, key dim, value dim,
    // experts, used)
    let want = [
        ("conv-c-f32.gguf", (2, 1), 256, 64, (1, 2), 128, 128, 8, 2),
        ("conv-d-mtp-f32.gguf", (4, 1), 64, 32, (1, 4), 64, 32, 8, 4),
    ];
    for (file, heads, hd, rope, ssm, kd, vd, ne, nu) in want {
        let c = Model::open(&fixture(file)).expect("open").config;
        assert_eq!((c.n_head, c.n_head_kv), heads, "{file}");
        assert_eq!((c.head_dim, c.rope_dims), (hd, rope), "{file}");
        assert_eq!((c.ssm_k_heads, c.ssm_v_heads), ssm, "{file}");
        assert_eq!((c.ssm_k_dim, c.ssm_v_dim), (kd, vd), "{file}");
        assert_eq!((c.n_experts, c.n_experts_used), (ne, nu), "{file}");
        assert!(matches!(c.head_dim, 32 | 64 | 128 | 256), "{file}");
        assert!(matches!(c.ssm_k_dim, 64 | 128), "{file}");
        assert!(c.ssm_v_dim % 32 == 0 && c.ssm_v_dim <= 128, "{file}");
    }
}

/// Real metadata (a gpt2 tokenizer with merges and token types, pre-tokenizer `qwen35`, a chat
/// template, general.*) is in every converter file; none of it is in tally's way.
#[test]
fn converter_metadata_is_present_and_harmless() {
    let m = Model::open(&fixture("conv-b-q8_0.gguf")).expect("open");
    let f = &m.file;
    let s = |k: &str| f.get(k).and_then(|v| v.as_str()).map(str::to_string);
    assert_eq!(s("tokenizer.ggml.model").as_deref(), Some("gpt2"));
    assert_eq!(s("tokenizer.ggml.pre").as_deref(), Some("qwen35"));
    assert!(s("tokenizer.chat_template").is_some_and(|t| t.contains("im_start")));
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(0, |a| a.len());
    assert_eq!(tokens, m.config.vocab);
    assert!(f.get("tokenizer.ggml.merges").is_some());
    assert!(f.get("general.file_type").is_some());
    assert!(f.get("general.quantization_version").is_some());
}

/// The converter's MTP file with one MTP tensor's shape broken (same bytes) is refused, naming it.
#[test]
fn a_broken_mtp_tensor_in_a_converter_file_is_named() {
    use tally_gguf::{GgufWriter, TensorSpec};
    let g = GgufFile::open(&fixture("conv-a-mtp-f32.gguf")).expect("open");
    let broken = "blk.4.nextn.eh_proj.weight";
    let specs: Vec<TensorSpec> = g
        .tensors()
        .iter()
        .map(|t| {
            let mut dims = t.dims.clone();
            if t.name == broken {
                dims.swap(0, 1);
            }
            TensorSpec {
                name: t.name.clone(),
                dims,
                ty: t.ty,
            }
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), g.metadata(), &specs).expect("writer");
    for t in g.tensors() {
        w.write_data(g.tensor_data(t)).expect("data");
    }
    let file = GgufFile::from_bytes(w.finish().expect("finish"), "broken").expect("parse");
    let e = Model::from_file(std::path::Path::new("broken"), file)
        .err()
        .expect("a broken MTP tensor must be refused")
        .to_string();
    assert!(
        e.contains(broken) && e.contains("[32, 64]") && e.contains("[64, 32]"),
        "{e}"
    );
}

/// conv-a-mtp-q8_0 cut into three parts by llama.cpp's gguf-py writer (split/, made by
/// tools/convert/split_fixture.py), opened from its first part: the same logits as the whole
/// file, bit for bit, over the prompt and a few greedy steps, and the MTP block kept.
#[test]
fn a_split_converter_file_runs_as_the_whole_file() {
    let r = Reference::open("conv-a-mtp");
    let whole = Arc::new(Model::open(&fixture("conv-a-mtp-q8_0.gguf")).expect("open whole"));
    let split = Arc::new(
        Model::open(&fixture("split/conv-a-mtp-q8_0-00001-of-00003.gguf")).expect("open split"),
    );
    assert_eq!(split.file.part_paths().len(), 3);
    assert_eq!(split.config.n_mtp_layers, 1);
    let prompt = r.ids("prompt_ids");
    let (mut a, mut b) = (
        session(&whole, prompt.len() + 5),
        session(&split, prompt.len() + 5),
    );
    let (mut la, mut lb) = (
        a.prefill(&prompt).expect("prefill"),
        b.prefill(&prompt).expect("prefill"),
    );
    for step in 0..4 {
        assert!(all_finite(&la));
        assert!(
            la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
            "step {step}: the split file's logits differ from the whole file's"
        );
        let id = argmax(&la);
        la = a.decode(id).expect("decode");
        lb = b.decode(id).expect("decode");
    }
}
