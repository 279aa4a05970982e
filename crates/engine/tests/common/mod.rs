//! Shared test helpers: synthetic models written to a temporary directory.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use tally_engine::Session;
use tally_engine::cpu::CpuBackend;
use tally_model::Model;
use tally_model::rng::Rng;
use tally_model::synth::{Preset, QuantMix, SynthSpec, write_model};

/// Writes a synthetic model into `dir` and opens it.
pub fn synth_model(
    dir: &tempfile::TempDir,
    preset: Preset,
    quant: QuantMix,
    seed: u64,
) -> Arc<Model> {
    let path: PathBuf = dir
        .path()
        .join(format!("{}-{}-{seed}.gguf", preset.name(), quant.name()));
    let spec = SynthSpec {
        preset,
        config: preset.config(),
        quant,
        seed,
        fill: Default::default(),
    };
    let f = std::fs::File::create(&path).expect("create model file");
    write_model(&spec, std::io::BufWriter::new(f), &mut |_, _| {}).expect("synth");
    Arc::new(Model::open(&path).expect("open synth model"))
}

pub fn session(model: &Arc<Model>, max_ctx: usize) -> Session<CpuBackend> {
    let b = CpuBackend::new(model.clone(), 0).expect("backend");
    Session::new(model.clone(), b, max_ctx).expect("session")
}

pub fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.below(vocab as u64) as u32).collect()
}

/// ||a - b|| / ||b|| in f64.
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (num / den.max(1e-300)).sqrt()
}

pub fn all_finite(v: &[f32]) -> bool {
    v.iter().all(|x| x.is_finite())
}
