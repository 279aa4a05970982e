//! Helpers the peer's integration tests share: the converter fixtures' folder, llama.cpp's
//! test parameters, tally's CPU logits, and the relative error both sides are compared by.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use tally_peer_llama::PeerParams;

/// A file under crates/engine/tests/fixtures/converter (the converter-made fixtures).
pub fn converter_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures/converter")
        .join(name)
}

/// One thread: the CI machine is small and shared, and ggml's thread barriers suffer most there.
pub fn params() -> PeerParams {
    PeerParams {
        threads: 1,
        ..PeerParams::default()
    }
}

/// tally's CPU backend (one thread): the logits after prefilling `tokens`.
pub fn cpu_logits(model: Arc<tally_model::Model>, tokens: &[u32]) -> Vec<f32> {
    let cpu = tally_engine::cpu::CpuBackend::new(model.clone(), 1).unwrap();
    tally_engine::Session::new(model, cpu, tokens.len())
        .unwrap()
        .prefill(tokens)
        .unwrap()
}

/// ||a - b|| / ||b|| in f64; infinite when the lengths differ.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        num += (f64::from(*x) - f64::from(*y)).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den.max(1e-300)).sqrt()
}
