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

use tally_engine::Backend;

/// A CPU backend that keeps "segments" the way the CUDA backend keeps graphs: a kept segment is
/// replayed by dispatching its nodes again, and every call is recorded.
struct Segments {
    inner: tally_engine::cpu::CpuBackend,
    kept: std::collections::BTreeSet<(usize, usize, usize)>,
    launched: Vec<(usize, usize)>,
    captured: Vec<(usize, usize)>,
    direct: Vec<usize>,
    capturing: bool,
}

impl tally_engine::Backend for Segments {
    fn name(&self) -> &'static str {
        "cpu-segments"
    }
    fn device(&self) -> String {
        self.inner.device()
    }
    fn prepare(&mut self, plan: &tally_model::Plan) -> Result<(), tally_engine::EngineError> {
        self.inner.prepare(plan)
    }
    fn reset_state(&mut self) -> Result<(), tally_engine::EngineError> {
        self.inner.reset_state()
    }
    fn dispatch(
        &mut self,
        plan: &tally_model::Plan,
        index: usize,
        target: tally_engine::Target,
    ) -> Result<(), tally_engine::EngineError> {
        if !self.capturing {
            self.direct.push(index);
        }
        self.inner.dispatch(plan, index, target)
    }
    fn barrier(&mut self) -> Result<(), tally_engine::EngineError> {
        self.inner.barrier()
    }
    fn read(
        &mut self,
        plan: &tally_model::Plan,
        view: tally_model::View,
    ) -> Result<Vec<f32>, tally_engine::EngineError> {
        self.inner.read(plan, view)
    }
    fn read_i32(
        &mut self,
        plan: &tally_model::Plan,
        view: tally_model::View,
    ) -> Result<Vec<i32>, tally_engine::EngineError> {
        self.inner.read_i32(plan, view)
    }
    fn write_i32(
        &mut self,
        plan: &tally_model::Plan,
        view: tally_model::View,
        data: &[i32],
    ) -> Result<(), tally_engine::EngineError> {
        self.inner.write_i32(plan, view, data)
    }
    fn write(
        &mut self,
        plan: &tally_model::Plan,
        view: tally_model::View,
        data: &[f32],
    ) -> Result<(), tally_engine::EngineError> {
        self.inner.write(plan, view, data)
    }
    fn segment_launch(
        &mut self,
        plan: &tally_model::Plan,
        from: usize,
        to: usize,
    ) -> Result<bool, tally_engine::EngineError> {
        if !self.kept.contains(&(plan.n_tokens, from, to)) {
            return Ok(false);
        }
        self.launched.push((from, to));
        for i in from..to {
            self.inner.dispatch(plan, i, tally_engine::Target::Real)?;
        }
        Ok(true)
    }
    fn segment_begin(
        &mut self,
        _plan: &tally_model::Plan,
        from: usize,
        to: usize,
    ) -> Result<bool, tally_engine::EngineError> {
        self.captured.push((from, to));
        self.capturing = true;
        Ok(true)
    }
    fn segment_end(
        &mut self,
        plan: &tally_model::Plan,
        from: usize,
        to: usize,
        keep: bool,
    ) -> Result<(), tally_engine::EngineError> {
        self.capturing = false;
        if keep {
            self.kept.insert((plan.n_tokens, from, to));
        }
        Ok(())
    }
}

/// Decode keeps the position-independent stretches of the one-token plan as segments and
/// dispatches only the full-attention layers' cache writes, RoPE and attention each step; the
/// logits equal plain decoding's.
#[test]
fn segmented_decode_runs_only_position_dependent_nodes_directly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 7);
    let ids = random_ids(12, model.config.vocab, 70);
    let mut plain = session(&model, 16);
    plain.prefill(&ids[..8]).expect("prefill");
    let mut want = Vec::new();
    for &id in &ids[8..] {
        let plan = plain.plan(1, plain.n_past()).expect("plan");
        plain.backend.prepare(&plan).expect("prepare");
        want.push(
            plain
                .decode_with(id, &mut tally_engine::exec::NoHook)
                .expect("decode"),
        );
    }
    let inner = tally_engine::cpu::CpuBackend::new(model.clone(), 0).expect("backend");
    let seg = Segments {
        inner,
        kept: Default::default(),
        launched: Vec::new(),
        captured: Vec::new(),
        direct: Vec::new(),
        capturing: false,
    };
    let mut s = tally_engine::Session::new(model.clone(), seg, 16).expect("session");
    s.prefill(&ids[..8]).expect("prefill");
    for (step, &id) in ids[8..].iter().enumerate() {
        s.backend.direct.clear();
        s.backend.launched.clear();
        let got = s.decode(id).expect("decode");
        assert_eq!(got, want[step], "step {step}: segmented decode differs");
        let plan = s.plan(1, s.n_past() - 1).expect("plan");
        let names: Vec<&str> = s
            .backend
            .direct
            .iter()
            .map(|&i| plan.nodes[i].name.as_str())
            .collect();
        let full: Vec<usize> = (0..model.config.layers.len())
            .filter(|&il| model.config.layers[il] == tally_model::LayerKind::Full)
            .collect();
        assert!(!full.is_empty());
        let mut expected: Vec<String> = Vec::new();
        for il in &full {
            for n in ["attn_v", "attn_q_rope", "attn_k_rope", "attn"] {
                expected.push(format!("blk.{il}.{n}"));
            }
        }
        let mut got_names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        if step == 0 {
            // The first step captures every segment (its dispatches are not direct).
            assert!(!s.backend.captured.is_empty());
            assert!(s.backend.launched.is_empty());
        } else {
            // Captured once, at step 0; every later step relaunches each kept segment.
            assert_eq!(
                s.backend.launched, s.backend.captured,
                "every segment relaunched"
            );
        }
        got_names.sort();
        expected.sort();
        assert_eq!(
            got_names, expected,
            "step {step}: directly dispatched nodes"
        );
    }
}
