//! THE ORACLE of tally's MTP draft head: its logits against llama.cpp's MTP graph
//! (`LLAMA_CONTEXT_TYPE_MTP`) on the same converter-made files, for the same fresh random
//! (token, hidden state) pairs: one batch of rows in llama.cpp, one row at a time in tally
//! (so the head's own KV cache and positions are checked too), then a second batch after the
//! first in both. Relative error of every row's logits in f64.
//!
//! On conv-a-mtp (f32: 1.2e-7 to 1.8e-7; bf16 up to 4.2e-3, q8_0 up to 1.0e-2, the engines'
//! different activation precisions). conv-d-mtp cannot be the oracle's file: this llama.cpp
//! refuses to load it (`blk.0.attn_qkv.weight` has wrong shape; expected 32 x 384, got 32 x 256:
//! its loader sizes the linear-attention projection for a key-head count different from the
//! file's 1 key head to 4 value heads), while tally and transformers agree on it.

use std::sync::Arc;

use tally_engine::Session;
use tally_engine::cpu::CpuBackend;
use tally_engine::spec::MtpDraft;
use tally_model::Model;
use tally_model::rng::Rng;
use tally_peer_llama::mtp::LlamaMtp;

mod common;
use common::{converter_fixture as fixture, rel_err};

/// The worst relative error over rows of two chunks (6 rows at 0, 3 at 6) on `name`.
fn worst_error(name: &str, seed: u64) -> f64 {
    let path = fixture(name);
    let model = Arc::new(Model::open(&path).expect("tally opens the file"));
    let (d, vocab) = (model.config.hidden, model.config.vocab);
    let mut llama = LlamaMtp::open(&path, 32, 2).expect("llama.cpp MTP context");
    assert_eq!(llama.n_vocab() as usize, vocab);
    let backend = CpuBackend::new(model.clone(), 0).expect("backend");
    let mut s = Session::new(model.clone(), backend, 32).expect("session");
    let mut draft = MtpDraft::new(&model).expect("an MTP file");
    let mut rng = Rng::new(seed);
    let mut worst = 0.0f64;
    let mut pos = 0;
    for n in [6, 3] {
        let tokens: Vec<u32> = (0..n).map(|_| rng.below(vocab as u64) as u32).collect();
        let hidden: Vec<f32> = (0..n * d).map(|_| rng.normal()).collect();
        let want = llama
            .decode(&tokens, pos as u32, &hidden, d)
            .expect("llama.cpp MTP decode");
        for (i, &t) in tokens.iter().enumerate() {
            let (got, _) = draft
                .step(&mut s, &[t], pos + i, &hidden[i * d..(i + 1) * d])
                .expect("tally MTP step");
            assert_eq!(got.len(), want[i].len());
            let e = rel_err(&got, &want[i]);
            println!("{name}: position {}: rel err {e:.3e}", pos + i);
            worst = worst.max(e);
        }
        pos += n;
    }
    worst
}

#[test]
fn mtp_logits_match_llama_cpp_f32() {
    let e = worst_error("conv-a-mtp-f32.gguf", 11);
    assert!(e < 1e-5, "worst relative error {e:.3e}");
}

/// Quantised files: both engines read the same q8_0 / bf16 bytes, but compute in different
/// precisions (llama.cpp's CPU quantises activations to q8_0 for q8_0 matmuls), so the bound
/// is the trunk comparison's for these types.
#[test]
fn mtp_logits_match_llama_cpp_quantised() {
    for (name, bound) in [
        ("conv-a-mtp-bf16.gguf", 2e-2),
        ("conv-a-mtp-q8_0.gguf", 5e-2),
    ] {
        let e = worst_error(name, 12);
        assert!(e < bound, "{name}: worst relative error {e:.3e}");
    }
}
