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
            ..PlanOptions::default()
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
    let plan = s.plan(7).expect("plan");
    assert_eq!(stats.dispatches, plan.nodes.len() as u64);
    assert_eq!(hook.replays, 2 * plan.nodes.len() as u64);
}

#[test]
fn activations_stay_finite_and_alive_through_layers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q4KM, 7);
    let ids = random_ids(16, model.config.vocab, 7);
    let mut s = session(&model, 16);
    let plan = s.plan(16).expect("plan");
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

/// A CPU backend that keeps "graphs" the way the CUDA backend does: dispatches during a capture
/// are recorded, not run; ending the capture keeps the list and runs it once; a kept graph is
/// relaunched by running its list again. So the work reads the position buffer when a graph is
/// launched, as a device graph does, never when it was captured.
struct Graphs {
    inner: tally_engine::cpu::CpuBackend,
    kept: std::collections::HashMap<usize, (Vec<usize>, GraphCount)>,
    recording: Option<(Vec<usize>, GraphCount)>,
    /// A node whose launch never reaches the graph (as a launch on the wrong stream would).
    drop: Option<usize>,
    captures: usize,
    launches: usize,
    direct: usize,
}

impl Graphs {
    fn new(model: &std::sync::Arc<tally_model::Model>) -> Graphs {
        Graphs {
            inner: tally_engine::cpu::CpuBackend::new(model.clone(), 0).expect("backend"),
            kept: Default::default(),
            recording: None,
            drop: None,
            captures: 0,
            launches: 0,
            direct: 0,
        }
    }
    fn run(&mut self, plan: &tally_model::Plan, list: &[usize]) -> Result<(), EngineError> {
        for &i in list {
            self.inner.dispatch(plan, i, Target::Real)?;
        }
        Ok(())
    }
}

use tally_engine::{EngineError, GraphCount, Target};
use tally_model::{Plan, View};

impl Backend for Graphs {
    fn name(&self) -> &'static str {
        "cpu-graphs"
    }
    fn device(&self) -> String {
        self.inner.device()
    }
    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError> {
        self.inner.prepare(plan)
    }
    fn reset_state(&mut self) -> Result<(), EngineError> {
        self.inner.reset_state()
    }
    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        match &mut self.recording {
            Some((list, count)) => {
                count.dispatches += 1;
                count.launches += 1;
                if self.drop != Some(index) {
                    list.push(index);
                }
                Ok(())
            }
            None => {
                self.direct += 1;
                self.inner.dispatch(plan, index, target)
            }
        }
    }
    fn barrier(&mut self) -> Result<(), EngineError> {
        self.inner.barrier()
    }
    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError> {
        self.inner.read(plan, view)
    }
    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError> {
        self.inner.read_i32(plan, view)
    }
    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError> {
        self.inner.write_i32(plan, view, data)
    }
    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError> {
        self.inner.write(plan, view, data)
    }
    fn graph_launch(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        let Some((list, _)) = self.kept.get(&plan.n_tokens).cloned() else {
            return Ok(false);
        };
        self.launches += 1;
        self.run(plan, &list)?;
        Ok(true)
    }
    fn capture_begin(&mut self, _plan: &Plan) -> Result<bool, EngineError> {
        self.captures += 1;
        self.recording = Some((Vec::new(), GraphCount::default()));
        Ok(true)
    }
    fn capture_end(&mut self, plan: &Plan, keep: bool) -> Result<(), EngineError> {
        let (list, count) = self.recording.take().unwrap_or_default();
        if keep {
            self.run(plan, &list)?;
            let count = GraphCount {
                kernel_nodes: list.len() as u64,
                ..count
            };
            self.kept.insert(plan.n_tokens, (list, count));
        }
        Ok(())
    }
    fn graph_count(&self, plan: &Plan) -> Option<GraphCount> {
        self.kept.get(&plan.n_tokens).map(|(_, c)| *c)
    }
}

/// One decode plan serves every position: the session hands out the same plan at every step,
/// and a plan built for one position equals a plan built for another (the position is data).
#[test]
fn one_decode_plan_serves_every_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 8);
    let ids = random_ids(12, model.config.vocab, 80);
    let mut s = session(&model, 16);
    s.prefill(&ids[..8]).expect("prefill");
    let first = s.plan(1).expect("plan");
    for &id in &ids[8..] {
        s.decode(id).expect("decode");
        assert!(std::sync::Arc::ptr_eq(&first, &s.plan(1).expect("plan")));
    }
    // Two fresh sessions, one at position 3 and one at position 11: the plans are equal.
    let mut a = session(&model, 16);
    a.prefill(&ids[..3]).expect("prefill 3");
    let mut b = session(&model, 16);
    b.prefill(&ids[..11]).expect("prefill 11");
    assert_eq!(*a.plan(1).expect("a"), *b.plan(1).expect("b"));
}

/// Decode on a backend with graphs captures the one-token plan once and relaunches it at every
/// later position; the logits are bit-identical to dispatching node by node.
#[test]
fn graph_decode_captures_once_and_relaunches_at_every_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 7);
    let ids = random_ids(13, model.config.vocab, 70);
    let mut plain = session(&model, 16);
    plain.prefill(&ids[..8]).expect("prefill");
    let want: Vec<Vec<f32>> = ids[8..]
        .iter()
        .map(|&id| {
            plain
                .decode_with(id, &mut tally_engine::exec::NoHook)
                .expect("decode")
        })
        .collect();
    let mut s = tally_engine::Session::new(model.clone(), Graphs::new(&model), 16).expect("s");
    s.prefill(&ids[..8]).expect("prefill");
    assert_eq!((s.backend.captures, s.backend.launches), (1, 0));
    for (step, &id) in ids[8..].iter().enumerate() {
        let got = s.decode(id).expect("decode");
        assert_eq!(got, want[step], "step {step}: graph decode differs");
        // The prefill's graph and the decode graph, each captured once.
        assert_eq!(s.backend.captures, 2, "step {step}");
        assert_eq!(s.backend.launches, step, "step {step}");
    }
    assert_eq!(s.backend.direct, 0, "nothing dispatched outside a graph");
}

/// A prompt in chunks gives the logits of the whole prompt at once, and of token-by-token
/// decoding after the first chunk: prefill of T tokens after n_past > 0 is the same plan shape.
#[test]
fn chunked_prefill_equals_one_prefill_and_decoding() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (preset, quant, seed) in [
        (Preset::Tiny, QuantMix::Q8_0, 11),
        (Preset::TinyOdd, QuantMix::Bf16, 12),
    ] {
        let model = synth_model(&dir, preset, quant, seed);
        let ids = random_ids(14, model.config.vocab, seed);
        let mut whole = session(&model, 16);
        let want = whole.prefill(&ids).expect("prefill 14");
        let mut chunks = session(&model, 16);
        chunks.prefill(&ids[..5]).expect("prefill 5");
        chunks.append(&ids[5..9]).expect("append 4");
        let (got, _) = chunks.append(&ids[9..]).expect("append 5");
        assert_eq!(chunks.n_past(), 14);
        let err = rel_err(&got, &want);
        assert!(
            err < 1e-5,
            "{preset:?}: chunks vs one prefill rel err {err}"
        );
        let mut steps = session(&model, 16);
        steps.prefill(&ids[..5]).expect("prefill 5");
        let mut last = Vec::new();
        for &id in &ids[5..] {
            last = steps.decode(id).expect("decode");
        }
        let err = rel_err(&got, &last);
        assert!(err < 1e-5, "{preset:?}: chunks vs decoding rel err {err}");
        // Past the context: an error, not a write outside the cache.
        assert!(chunks.append(&ids[..3]).is_err());
    }
}

/// `Session::ubatch` splits a long prompt inside `prefill_plain`/`extend`: the same logits as one
/// plan of the whole prompt, every batch's dispatches counted, the position at the end, and
/// only the batch lengths' plans built (so activation memory follows the batch).
#[test]
fn ubatch_splits_the_prompt_and_keeps_the_logits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q4KM, 21);
    let ids = random_ids(23, model.config.vocab, 21);
    let mut whole = session(&model, 32);
    whole.ubatch = 0;
    let (want, one) = whole.prefill_plain(&ids).expect("one plan");
    let nodes = |s: &mut tally_engine::Session<_>, n| s.plan(n).expect("plan").nodes.len() as u64;
    assert_eq!(one.dispatches, nodes(&mut whole, 23));
    let next = whole.decode(ids[0]).expect("decode after one plan");
    for ubatch in [1, 5, 8, 22, 23, 64] {
        let mut split = session(&model, 32);
        split.ubatch = ubatch;
        let (got, stats) = split.prefill_plain(&ids).expect("batches");
        assert_eq!(split.n_past(), 23);
        let err = rel_err(&got, &want);
        assert!(err < 1e-5, "ubatch {ubatch}: rel err {err} vs one plan");
        let full = 23 / ubatch.min(23);
        let rest = 23 - full * ubatch.min(23);
        let mut want_dispatches = full as u64 * nodes(&mut split, ubatch.min(23));
        if rest > 0 {
            want_dispatches += nodes(&mut split, rest);
        }
        assert_eq!(stats.dispatches, want_dispatches, "ubatch {ubatch}");
        // Decoding after a split prompt continues the same sequence.
        let a = split.decode(ids[0]).expect("decode after batches");
        let err = rel_err(&a, &next);
        assert!(
            err < 1e-5,
            "ubatch {ubatch}: decode after batches rel err {err}"
        );
    }
    // extend() splits too, after a first turn.
    let mut turns = session(&model, 32);
    turns.ubatch = 4;
    turns.prefill_plain(&ids[..6]).expect("turn 1");
    let got = turns.extend(&ids[6..]).expect("turn 2 in batches of 4");
    assert_eq!(turns.n_past(), 23);
    let err = rel_err(&got, &want);
    assert!(err < 1e-5, "extend in batches: rel err {err}");
    // An empty prompt is an error, whatever the batch.
    assert!(turns.extend(&[]).is_err());
}

/// The probe check can fail: a graph that lacks one launch reports one dispatch fewer than the
/// plan's nodes (what the ledger compares with the work nodes), on capture and on relaunch.
#[test]
fn a_graph_missing_a_launch_fails_the_dispatch_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 9);
    let ids = random_ids(6, model.config.vocab, 90);
    for drop in [None, Some(3)] {
        let mut backend = Graphs::new(&model);
        backend.drop = drop;
        let mut s = tally_engine::Session::new(model.clone(), backend, 8).expect("session");
        let n = s.plan(6).expect("plan").nodes.len() as u64;
        let lost = u64::from(drop.is_some());
        for run in ["capture", "relaunch"] {
            let (_, stats) = s.prefill_plain(&ids).expect("prefill");
            let g = stats.graph.expect("a graph run");
            assert_eq!((g.dispatches, g.launches), (n, n), "{run}");
            assert_eq!(g.kernel_nodes, n - lost, "{run}");
            assert_eq!(g.missing(), lost, "{run}");
            assert_eq!(stats.dispatches, n - lost, "{run}: dispatches reported");
        }
    }
}

#[test]
fn graph_count_missing_counts_lost_extra_and_silent_work() {
    let ok = GraphCount {
        dispatches: 10,
        silent: 0,
        launches: 14,
        library_calls: 0,
        kernel_nodes: 14,
    };
    assert_eq!(ok.missing(), 0);
    assert_eq!(
        GraphCount {
            kernel_nodes: 12,
            ..ok
        }
        .missing(),
        2
    );
    assert_eq!(
        GraphCount {
            kernel_nodes: 15,
            ..ok
        }
        .missing(),
        1
    );
    assert_eq!(GraphCount { silent: 1, ..ok }.missing(), 1);
    // cuBLAS adds kernels of its own: at least one per call.
    let blas = GraphCount {
        library_calls: 2,
        kernel_nodes: 19,
        ..ok
    };
    assert_eq!(blas.missing(), 0);
    assert_eq!(
        GraphCount {
            kernel_nodes: 15,
            ..blas
        }
        .missing(),
        1
    );
}

/// A CPU backend with one "fused launch": an Add and the node after it dispatched together.
struct Fuser {
    inner: tally_engine::cpu::CpuBackend,
    fused: usize,
}

impl Backend for Fuser {
    fn name(&self) -> &'static str {
        "cpu-fuser"
    }
    fn device(&self) -> String {
        self.inner.device()
    }
    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError> {
        self.inner.prepare(plan)
    }
    fn reset_state(&mut self) -> Result<(), EngineError> {
        self.inner.reset_state()
    }
    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        self.inner.dispatch(plan, index, target)
    }
    fn dispatch_fused(&mut self, plan: &Plan, index: usize) -> Result<usize, EngineError> {
        if plan.nodes[index].op != tally_model::Op::Add || index + 1 >= plan.nodes.len() {
            return Ok(0);
        }
        self.inner.dispatch(plan, index, Target::Real)?;
        self.inner.dispatch(plan, index + 1, Target::Real)?;
        self.fused += 1;
        Ok(2)
    }
    fn barrier(&mut self) -> Result<(), EngineError> {
        self.inner.barrier()
    }
    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError> {
        self.inner.read(plan, view)
    }
    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError> {
        self.inner.read_i32(plan, view)
    }
    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError> {
        self.inner.write_i32(plan, view, data)
    }
    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError> {
        self.inner.write(plan, view, data)
    }
}

/// Fused launches run on the plain path only: there they cover their nodes (the dispatch count
/// is still one per node, as the ledger's probe check wants), and an instrumented run, which
/// watches nodes one by one, never gets one.
#[test]
fn fused_launches_run_on_the_plain_path_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 9);
    let ids = random_ids(6, model.config.vocab, 9);
    let want = session(&model, 8).prefill(&ids).expect("cpu");
    let backend = Fuser {
        inner: tally_engine::cpu::CpuBackend::new(model.clone(), 0).expect("backend"),
        fused: 0,
    };
    let mut s = tally_engine::Session::new(model.clone(), backend, 8).expect("session");
    let (got, stats) = s.prefill_plain(&ids).expect("plain");
    assert_eq!(got, want);
    let plan = s.plan(6).expect("plan");
    let adds = plan
        .nodes
        .iter()
        .filter(|n| n.op == tally_model::Op::Add)
        .count();
    assert!(s.backend.fused > 0 && s.backend.fused <= adds);
    assert_eq!(stats.dispatches, plan.nodes.len() as u64);
    let fused = s.backend.fused;
    let all: CategorySet = Category::ALL.into_iter().collect();
    let mut hook = Instrument::new(&RunMode::Observe(all));
    let t0 = std::time::Instant::now();
    let (observed, stats) = s.prefill_with(&ids, &mut hook).expect("observe");
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(observed, want);
    // The time inside the observed nodes is a part of the run's wall time.
    assert!(
        hook.in_node_ms > 0.0 && hook.in_node_ms <= wall_ms,
        "{} of {wall_ms}",
        hook.in_node_ms
    );
    assert_eq!(s.backend.fused, fused, "an instrumented run fused nodes");
    assert_eq!(stats.dispatches, plan.nodes.len() as u64);
    // Replays are not inside: with every node replayed four times, four fifths of the node work
    // is outside the timed intervals.
    let all: CategorySet = Category::ALL.into_iter().collect();
    let mut hook = Instrument::new(&RunMode::Replay {
        categories: all,
        times: 4,
    });
    let t0 = std::time::Instant::now();
    let (replayed, _) = s.prefill_with(&ids, &mut hook).expect("replay");
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(replayed, want);
    assert!(
        hook.in_node_ms > 0.0 && hook.in_node_ms < 0.5 * wall_ms,
        "{} of {wall_ms}",
        hook.in_node_ms
    );
}
