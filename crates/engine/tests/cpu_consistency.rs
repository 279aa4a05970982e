//! The CPU reference agrees with itself across the paths that must compute the same thing:
//! prefill vs prefill + decode, pruned vs unpruned last layer, with vs without replay.

mod common;

use common::*;
use tally_engine::exec::{Capture, Instrument};
use tally_ledger::Category;
use tally_ledger::subject::{CategorySet, RunMode};
use tally_model::PlanOptions;
use tally_model::synth::{Preset, QuantMix};

fn prefill_vs_decode(preset: Preset, quant: QuantMix, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, preset, quant, seed);
    let vocab = model.config.vocab;
    let ids = random_ids(13, vocab, seed + 100);
    let mut full = session(&model, 16);
    let want = full.prefill(&ids).expect("prefill 13");
    assert!(all_finite(&want));
    let mut inc = session(&model, 16);
    inc.prefill(&ids[..10]).expect("prefill 10");
    let mut got = Vec::new();
    for &id in &ids[10..] {
        got = inc.decode(id).expect("decode");
    }
    let err = rel_err(&got, &want);
    assert!(
        err < 1e-5,
        "{preset:?} {quant:?}: decode vs prefill rel err {err}"
    );
}

#[test]
fn decode_continues_prefill_tiny_q8() {
    prefill_vs_decode(Preset::Tiny, QuantMix::Q8_0, 1);
}

#[test]
fn decode_continues_prefill_tiny_odd_bf16() {
    prefill_vs_decode(Preset::TinyOdd, QuantMix::Bf16, 2);
}

#[test]
fn decode_continues_prefill_tiny_q4km() {
    prefill_vs_decode(Preset::Tiny, QuantMix::Q4KM, 3);
}

#[test]
fn pruned_last_layer_gives_the_same_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (preset, seed) in [(Preset::Tiny, 4), (Preset::TinyOdd, 5)] {
        let model = synth_model(&dir, preset, QuantMix::Q8_0, seed);
        let ids = random_ids(9, model.config.vocab, seed);
        let mut pruned = session(&model, 9);
        let a = pruned.prefill(&ids).expect("pruned");
        let mut full = session(&model, 9);
        full.opts = PlanOptions {
            prune_last_layer: false,
        };
        let b = full.prefill(&ids).expect("unpruned");
        let err = rel_err(&a, &b);
        assert!(err < 1e-6, "{preset:?}: pruned vs unpruned rel err {err}");
    }
}

#[test]
fn replay_leaves_outputs_bit_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 6);
    let ids = random_ids(7, model.config.vocab, 6);
    let mut s = session(&model, 7);
    let base = s.prefill(&ids).expect("plain");
    let all: CategorySet = Category::ALL.into_iter().collect();
    let mut hook = Instrument::new(&RunMode::Replay {
        categories: all,
        times: 2,
    });
    let (replayed, stats) = s.prefill_with(&ids, &mut hook).expect("replay");
    assert_eq!(base, replayed, "replay changed the logits");
    let plan = s.plan(7, 0).expect("plan");
    assert_eq!(stats.dispatches, plan.nodes.len() as u64);
    assert_eq!(hook.replays, 2 * plan.nodes.len() as u64);
}

#[test]
fn activations_stay_finite_and_alive_through_layers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q4KM, 7);
    let ids = random_ids(16, model.config.vocab, 7);
    let mut s = session(&model, 16);
    let plan = s.plan(16, 0).expect("plan");
    let mut cap = Capture::layer_outputs(&plan);
    s.prefill_with(&ids, &mut cap).expect("prefill");
    assert_eq!(cap.values.len(), model.config.n_layers);
    let mut prev_rms = 0.0;
    for (name, v) in &cap.values {
        assert!(all_finite(v), "{name} has non-finite values");
        let rms = (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        assert!(rms > 0.1 && rms < 100.0, "{name}: rms {rms}");
        assert!((rms - prev_rms).abs() > 1e-6, "{name}: layer did nothing");
        prev_rms = rms;
    }
}
