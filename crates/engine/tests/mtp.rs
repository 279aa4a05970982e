//! The MTP draft head on the CPU: speculative greedy decoding with it reproduces plain greedy
//! decoding token for token (converter-made MTP files and a `synth --mtp` model, k = 1..4,
//! several prompts); its cache filled in one batch or a token at a time gives the same step;
//! its acceptance on these random-weight files is printed, not asserted (it is near zero).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use tally_engine::spec::{Draft, MtpDraft, greedy, greedy_plain};
use tally_model::Model;
use tally_model::synth::{Preset, QuantMix, SynthSpec, write_model};

fn fixture(name: &str) -> Arc<Model> {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/converter");
    // A test binary carried to another machine finds the fixtures from the repository root.
    let dir = if built.is_dir() {
        built
    } else {
        PathBuf::from("crates/engine/tests/fixtures/converter")
    };
    Arc::new(Model::open(&dir.join(name)).expect("open fixture"))
}

fn synth_mtp(dir: &tempfile::TempDir, preset: Preset, quant: QuantMix, seed: u64) -> Arc<Model> {
    let path = dir
        .path()
        .join(format!("mtp-{}-{seed}.gguf", preset.name()));
    let mut config = preset.config();
    config.n_mtp_layers = 1;
    let spec = SynthSpec {
        preset,
        config,
        quant,
        seed,
        fill: Default::default(),
    };
    let f = std::fs::File::create(&path).expect("create");
    write_model(&spec, std::io::BufWriter::new(f), &mut |_, _| {}).expect("synth");
    Arc::new(Model::open(&path).expect("open"))
}

fn models() -> Vec<(String, Arc<Model>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut out: Vec<_> = [
        "conv-d-mtp-f32.gguf",
        "conv-d-mtp-q8_0.gguf",
        "conv-d-mtp-bf16.gguf",
        "conv-a-mtp-q8_0.gguf",
    ]
    .iter()
    .map(|n| (n.to_string(), fixture(n)))
    .collect();
    out.push((
        "synth tiny --mtp".into(),
        synth_mtp(&dir, Preset::Tiny, QuantMix::Q8_0, 41),
    ));
    out
}

#[test]
fn speculative_greedy_with_the_mtp_draft_is_plain_greedy() {
    for (name, model) in models() {
        let vocab = model.config.vocab;
        let mut draft = MtpDraft::new(&model).expect("an MTP file");
        for (p_len, n_gen, seed) in [(1, 12, 3), (7, 16, 4), (13, 10, 5)] {
            let prompt = random_ids(p_len, vocab, seed);
            let want = greedy_plain(&mut session(&model, 64), &prompt, n_gen).expect("plain");
            for k in 1..=4 {
                let mut s = session(&model, 64);
                let (got, st) = greedy(&mut s, &prompt, n_gen, k, &mut draft).expect("spec");
                assert_eq!(got, want, "{name} prompt {p_len} k {k}: {st:?}");
                assert!(st.drafted > 0, "{name}: the head drafted nothing");
                println!(
                    "{name}: prompt {p_len} k {k}: {} of {} drafts kept (acceptance {:.3})",
                    st.accepted,
                    st.drafted,
                    st.acceptance()
                );
            }
        }
    }
}

/// The draft's cache filled by one catch-up batch over the prompt or a token at a time (the
/// session's `ubatch` of 1 splits the catch-up too) drafts the same tokens from logits within
/// 1e-5: positions, cache rows and hidden-state pairing agree between batch shapes.
#[test]
fn the_mtp_cache_does_not_depend_on_the_batch_shape() {
    let model = fixture("conv-d-mtp-f32.gguf");
    let vocab = model.config.vocab;
    let prompt = random_ids(9, vocab, 77);
    let run = |ubatch: usize| {
        let mut s = session(&model, 32);
        s.ubatch = ubatch;
        s.set_hidden(true);
        s.prefill(&prompt).expect("prefill");
        let mut d = MtpDraft::new(&model).expect("mtp");
        let mut seq = prompt.clone();
        seq.push(5);
        let drafts = d.propose(&mut s, &seq, 3).expect("propose");
        // One more step straight from the block, after the catch-up, at the next position.
        let h = vec![0.25f32; model.config.hidden];
        let (logits, _) = d
            .step(&mut s, &[drafts[0]], prompt.len() + 1, &h)
            .expect("step");
        (drafts, logits)
    };
    let (d1, l1) = run(0);
    let (d2, l2) = run(1);
    assert_eq!(d1, d2);
    assert!(all_finite(&l1));
    let e = rel_err(&l2, &l1);
    assert!(e < 1e-5, "logits differ by {e}");
}

#[test]
fn a_file_without_mtp_blocks_has_no_mtp_draft() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 3);
    let e = MtpDraft::new(&m).err().expect("no MTP block").to_string();
    assert!(e.contains("no MTP block"), "{e}");
}

/// On a GPU host (`TALLY_TEST_CUDA=1`; scripts/gpu/mtp.sh): the MTP step on CUDA against the
/// CPU reference for the same random (token, hidden state) rows (one batch of 6, then 3 rows
/// one at a time after it), logits and output hidden states; and greedy speculative decoding
/// with the MTP draft on CUDA equal to plain greedy decoding on CUDA, k = 1..4.
#[test]
fn cuda_mtp_step_matches_the_cpu() {
    if std::env::var_os("TALLY_TEST_CUDA").is_none() {
        eprintln!("skipped: set TALLY_TEST_CUDA=1 on a GPU host (scripts/gpu/mtp.sh)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut all: Vec<(String, Arc<Model>, f64)> = ["f32", "q8_0", "bf16"]
        .iter()
        .map(|q| {
            let n = format!("conv-d-mtp-{q}.gguf");
            let bound = if *q == "f32" { 1e-4 } else { 5e-2 };
            (n.clone(), fixture(&n), bound)
        })
        .collect();
    all.push((
        "synth tiny --mtp q8_0".into(),
        synth_mtp(&dir, Preset::Tiny, QuantMix::Q8_0, 42),
        5e-2,
    ));
    let mut worst_all = Vec::new();
    for (name, model, bound) in all {
        let cuda = || {
            let b = tally_engine::cuda::CudaBackend::new(model.clone()).expect("CUDA backend");
            tally_engine::Session::new(model.clone(), b, 64).expect("session")
        };
        let (d, vocab) = (model.config.hidden, model.config.vocab);
        let mut gpu = cuda();
        let mut cpu = session(&model, 64);
        let (mut dg, mut dc) = (
            MtpDraft::new(&model).expect("mtp"),
            MtpDraft::new(&model).expect("mtp"),
        );
        let mut rng = tally_model::rng::Rng::new(7);
        let mut worst = 0.0f64;
        let mut pos = 0;
        for (n, rows) in [(6, 6), (3, 1)] {
            let tokens: Vec<u32> = (0..n).map(|_| rng.below(vocab as u64) as u32).collect();
            let hidden: Vec<f32> = (0..n * d).map(|_| rng.normal()).collect();
            for (t, h) in tokens.chunks(rows).zip(hidden.chunks(rows * d)) {
                let (lg, hg) = dg.step(&mut gpu, t, pos, h).expect("cuda step");
                let (lc, hc) = dc.step(&mut cpu, t, pos, h).expect("cpu step");
                worst = worst.max(rel_err(&lg, &lc)).max(rel_err(&hg, &hc));
                pos += t.len();
            }
        }
        println!("{name}: MTP step CUDA vs CPU, worst rel err {worst:.3e} (bound {bound:.0e})");
        worst_all.push((name.clone(), worst, bound));
        for (p_len, n_gen, seed) in [(1, 16, 3), (9, 16, 4)] {
            let prompt = random_ids(p_len, vocab, seed);
            let want = greedy_plain(&mut cuda(), &prompt, n_gen).expect("plain");
            for k in 1..=4 {
                let mut s = cuda();
                let (got, st) = greedy(&mut s, &prompt, n_gen, k, &mut dg).expect("spec");
                assert_eq!(got, want, "{name} on CUDA prompt {p_len} k {k}: {st:?}");
                println!(
                    "{name} on CUDA prompt {p_len} k {k}: greedy identical, {} of {} drafts kept",
                    st.accepted, st.drafted
                );
            }
        }
    }
    for (name, worst, bound) in worst_all {
        assert!(worst < bound, "{name}: MTP step CUDA vs CPU {worst:.3e}");
    }
}
