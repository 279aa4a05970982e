//! llama.cpp as a ledger subject, on tiny synthetic qwen35moe files (CPU build).
//!
//! Timing is never asserted: these tests check what the ledger relies on (graph counts equal
//! the architecture's, replay leaves the logits bit-identical, standalone timing runs for the
//! ops the ledger times) and the error texts.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tally_ledger::Category;
use tally_ledger::deadwork::dead_work;
use tally_ledger::graph::check_graph;
use tally_ledger::schema::{GraphExport, Routing};
use tally_ledger::subject::{OpTimingRequest, RunMode, Subject, SubjectError, Workload};
use tally_model::synth::{Preset, QuantMix, SynthSpec, apply_overrides, write_model};
use tally_peer_llama::{LlamaPeer, PeerParams};

mod common;
use common::{cpu_logits, params, rel_err};

/// Writes (once per test binary) a synthetic model and returns its path.
fn model(preset: Preset, quant: QuantMix, overrides: &[&str]) -> PathBuf {
    model_tagged(preset, quant, overrides, "")
}

/// As [`model`], with `tag` in the file name: a test that writes its own files must never
/// rewrite one another test has mapped (that is a SIGBUS in the other test).
fn model_tagged(preset: Preset, quant: QuantMix, overrides: &[&str], tag: &str) -> PathBuf {
    let mut cfg = preset.config();
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    apply_overrides(&mut cfg, &o).unwrap();
    let name = format!(
        "tally-peer-llama{tag}-{}-{}-{}-{}.gguf",
        preset.name(),
        quant.name(),
        overrides.join("_").replace('=', "-"),
        std::process::id()
    );
    // Under the target directory (cargo's scratch space for integration tests, removed by
    // `cargo clean`), not /tmp: the files are mapped until the process ends, so no test can
    // delete them, and each run's would pile up in /tmp.
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let spec = SynthSpec {
        preset,
        config: cfg,
        quant,
        seed: 1,
        fill: Default::default(),
    };
    let out = BufWriter::new(File::create(&path).unwrap());
    write_model(&spec, out, &mut |_, _| {}).unwrap();
    path
}

fn tiny() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| model(Preset::Tiny, QuantMix::Q8_0, &[]))
}

fn peer(path: &Path, p: PeerParams) -> LlamaPeer {
    LlamaPeer::load(path, p).unwrap()
}

fn prompt(peer: &LlamaPeer, n: usize, seed: u64) -> Vec<u32> {
    tally_ledger::rng::prompt_tokens(n, peer.info().model.n_vocab, seed).unwrap()
}

fn found(g: &GraphExport, c: Option<Category>, op: Option<&str>) -> u64 {
    g.nodes
        .iter()
        .filter(|n| !n.is_view && c.is_none_or(|c| c == n.category) && op.is_none_or(|o| o == n.op))
        .count() as u64
}

fn assert_counts_match(g: &GraphExport) {
    assert!(!g.expected.is_empty());
    for e in &g.expected {
        assert_eq!(
            found(g, e.category, e.op.as_deref()),
            e.expected,
            "{} ({})",
            e.what,
            e.derivation
        );
    }
    let report = check_graph(g);
    assert!(report.ok(), "{report:?}");
}

#[test]
fn loads_and_evaluates_a_prompt() {
    let mut p = peer(tiny(), params());
    let info = p.info();
    assert_eq!(info.engine, "llama.cpp");
    assert_eq!(info.backend, "cpu");
    assert_eq!(info.model.arch, "qwen35moe");
    assert!(info.model.n_layers >= 4 && info.model.n_experts > info.model.n_experts_used);
    let tokens = prompt(&p, 37, 1);
    let logits = p.prefill_logits(&tokens).unwrap();
    assert_eq!(logits.len(), info.model.n_vocab as usize);
    assert!(logits.iter().all(|v| v.is_finite()));
    let rms = (logits.iter().map(|v| v * v).sum::<f32>() / logits.len() as f32).sqrt();
    assert!(rms > 1e-3, "degenerate logits, rms {rms}");
    // Deterministic: the same prompt gives bit-identical logits; another prompt does not.
    assert_eq!(p.prefill_logits(&tokens).unwrap(), logits);
    assert_ne!(p.prefill_logits(&prompt(&p, 37, 2)).unwrap(), logits);
}

#[test]
fn real_vocabulary_loads() {
    let path = model(
        Preset::Tiny,
        QuantMix::Q8_0,
        &["vocab=248320", "n_layers=4"],
    );
    let mut p = peer(&path, params());
    assert_eq!(p.info().model.n_vocab, 248_320);
    let tokens = vec![0, 248_319, 123_456, 7];
    let logits = p.prefill_logits(&tokens).unwrap();
    assert_eq!(logits.len(), 248_320);
    assert!(logits.iter().all(|v| v.is_finite()));
    drop(p);
    let _ = std::fs::remove_file(path);
}

#[test]
fn graph_export_matches_the_architecture() {
    let mut p = peer(tiny(), params());
    let g = p.graph(Workload::prefill(37)).unwrap();
    assert_eq!(g.n_tokens, 37);
    assert_counts_match(&g);
    let cfg = p.config().clone();
    let layers = u64::from(cfg.n_layer);
    assert_eq!(found(&g, Some(Category::MoeGateUp), None), 2 * layers);
    assert_eq!(found(&g, Some(Category::DeltaRule), None), cfg.n_linear());
    assert_eq!(found(&g, Some(Category::Attention), None), cfg.n_full());
    assert_eq!(found(&g, Some(Category::Other), None), 0, "unmapped nodes");
    assert!(g.nodes.iter().any(|n| n.is_view));
    // Exactly one output node, the logits of the one requested row.
    let outs: Vec<_> = g.nodes.iter().filter(|n| n.is_output).collect();
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].rows, Some(1));
    assert_eq!(outs[0].category, Category::OutputHead);
    // KV cache writes and recurrent-state copies are persistent: 2 per full layer (K, V),
    // 2 per linear layer (conv state, delta state).
    let persistent = g
        .nodes
        .iter()
        .filter(|n| n.persistent && !n.is_view)
        .count() as u64;
    assert!(
        persistent >= 2 * cfg.n_full() + 2 * cfg.n_linear(),
        "{persistent}"
    );
    // Work is costed.
    let mm = g
        .nodes
        .iter()
        .find(|n| n.op == "MUL_MAT" && n.category == Category::DenseProj)
        .unwrap();
    assert!(mm.flops > 0 && mm.weight_bytes > 0 && mm.weight_params > 0 && mm.bytes_written > 0);
    // llama.cpp computes the last layer for every token and selects the output row after the
    // final norm: the dead-work analysis must see the last layer's work as partially dead.
    let last = layers - 1;
    let dw = dead_work(&g);
    assert!(dw.dead.is_empty(), "{:?}", dw.dead);
    assert!(
        dw.partial
            .iter()
            .any(|w| w.category == Category::MoeGateUp && w.layer == Some(last as u32)),
        "{:?}",
        dw.partial
    );
    assert!(
        dw.partial.iter().all(|w| w.layer == Some(last as u32)),
        "{:?}",
        dw.partial
    );
}

#[test]
fn graph_export_of_several_ubatches_and_odd_shapes() {
    let path = model(Preset::TinyOdd, QuantMix::Q4KM, &[]);
    let mut p = peer(
        &path,
        PeerParams {
            n_batch: 32,
            n_ubatch: 16,
            ..params()
        },
    );
    let g = p.graph(Workload::prefill(37)).unwrap();
    // 37 tokens in ubatches of 16: three graph executions, outputs only in the last.
    assert!(
        g.expected
            .iter()
            .any(|e| e.derivation.contains("x 3 ubatch graphs")),
        "{:?}",
        g.expected
    );
    assert_counts_match(&g);
    let dw = dead_work(&g);
    // The first two executions produce no logits: their last layer's query side is dead.
    assert!(!dw.dead.is_empty());
    drop(p);
    let _ = std::fs::remove_file(path);
}

#[test]
fn replay_leaves_the_outputs_bit_identical() {
    let mut p = peer(tiny(), params());
    let g = p.graph(Workload::prefill(24)).unwrap();
    let tokens = prompt(&p, 24, 7);
    let plain = p.prefill(&[], &tokens, &RunMode::Plain).unwrap();
    let all: BTreeSet<Category> = g
        .nodes
        .iter()
        .filter(|n| !n.is_view)
        .map(|n| n.category)
        .collect();
    let work = g.nodes.iter().filter(|n| !n.is_view).count() as u64;
    assert_eq!(plain.dispatches, work);
    let observe = p
        .prefill(&[], &tokens, &RunMode::Observe(all.clone()))
        .unwrap();
    assert_eq!(observe.output_digest, plain.output_digest);
    assert_eq!(observe.dispatches, work);
    // The time inside the observed nodes is a part of the run's wall time; plain runs have none.
    assert_eq!(plain.in_node_ms, None);
    let inside = observe.in_node_ms.expect("an observe run times its nodes");
    assert!(
        inside > 0.0 && inside <= observe.wall_ms,
        "{inside} of {}",
        observe.wall_ms
    );
    // Replays are not inside: with every node replayed four times, four fifths of the node work
    // is outside the timed segments.
    let r4 = p
        .prefill(
            &[],
            &tokens,
            &RunMode::Replay {
                categories: all.clone(),
                times: 4,
            },
        )
        .unwrap();
    let inside4 = r4
        .in_node_ms
        .expect("a replay run of every node times its nodes");
    assert!(inside4 < 0.5 * r4.wall_ms, "{inside4} of {}", r4.wall_ms);
    // Observing one category leaves the others' work inside its segments: no node time then.
    let one = p
        .prefill(
            &[],
            &tokens,
            &RunMode::Observe(BTreeSet::from([Category::DenseProj])),
        )
        .unwrap();
    assert_eq!(one.in_node_ms, None);
    for times in [1, 2] {
        let r = p
            .prefill(
                &[],
                &tokens,
                &RunMode::Replay {
                    categories: all.clone(),
                    times,
                },
            )
            .unwrap();
        assert_eq!(
            r.output_digest, plain.output_digest,
            "replay x{times} changed the logits"
        );
        assert_eq!(p.last_replay().dispatches, work * u64::from(times));
    }
    for c in [
        Category::DenseProj,
        Category::MoeGateUp,
        Category::DeltaRule,
        Category::Norm,
    ] {
        let set = BTreeSet::from([c]);
        let r = p
            .prefill(
                &[],
                &tokens,
                &RunMode::Replay {
                    categories: set,
                    times: 1,
                },
            )
            .unwrap();
        assert_eq!(
            r.output_digest, plain.output_digest,
            "replaying {c} changed the logits"
        );
        let n = g
            .nodes
            .iter()
            .filter(|n| !n.is_view && n.category == c)
            .count() as u64;
        assert_eq!(p.last_replay().dispatches, n, "{c}");
    }
    // Every replay recomputes its node: the scratch output equals the real output, bit for
    // bit, wherever the node did not overwrite its own input.
    p.set_replay_verify(true);
    let r = p
        .prefill(
            &[],
            &tokens,
            &RunMode::Replay {
                categories: all.clone(),
                times: 1,
            },
        )
        .unwrap();
    assert_eq!(r.output_digest, plain.output_digest);
    let stats = p.last_replay().clone();
    assert!(stats.mismatched.is_empty(), "{:?}", stats.mismatched);
    assert!(
        stats.verified + stats.aliased.len() as u64 >= work * 3 / 4,
        "{stats:?}"
    );
    assert!(stats.verified > work / 2, "{stats:?}");
    p.set_replay_verify(false);
    // Matmuls write fresh buffers; the allocator makes some small ops in-place, and the
    // replay reports them rather than hiding that they re-read their own output.
    let r = p
        .prefill(
            &[],
            &tokens,
            &RunMode::Replay {
                categories: BTreeSet::from([Category::DenseProj]),
                times: 1,
            },
        )
        .unwrap();
    assert_eq!(r.output_digest, plain.output_digest);
    assert!(
        p.last_replay().aliased.is_empty(),
        "{:?}",
        p.last_replay().aliased
    );
}

/// llama.cpp's own routing of a prompt, read from its `ffn_moe_topk-<layer>` nodes (a strided
/// view of the argsort), equals the routing tally's CPU reference records for the same file
/// and prompt, after a context and over several ubatches: the cross-check the ledger makes
/// before feeding tally's tables to both engines. On a tally synth file and on a file made by
/// llama.cpp's own converter (4 experts top-2, with its MTP block, which a prefill does not run).
#[test]
fn llama_cpp_routing_equals_tally_reference_routing() {
    let conv = common::converter_fixture("conv-a-mtp-q8_0.gguf");
    for path in [tiny(), conv.as_path()] {
        let mut p = peer(
            path,
            PeerParams {
                n_ubatch: 16,
                ..params()
            },
        );
        let tokens = prompt(&p, 45, 21);
        let (context, batch) = tokens.split_at(5);
        let got = p.routing_after(context, batch).unwrap();
        assert_eq!((got.recorded_by.as_str(), got.n_tokens), ("llama.cpp", 40));
        let model = Arc::new(tally_model::Model::open(path).unwrap());
        let cpu = tally_engine::cpu::CpuBackend::new(model.clone(), 1).unwrap();
        let session = tally_engine::Session::new(model, cpu, 64).unwrap();
        let mut tally = tally_engine::subject::TallySubject::new(session, "test".into());
        let want = tally.model_routing(context, batch).unwrap().unwrap();
        let a = tally_ledger::routing::agreement(&want, &got);
        // Every whole-batch layer compared (llama.cpp routes its last layer's rows unpruned).
        let whole = want.layers.iter().filter(|t| t.n_tokens == 40).count();
        assert!(a.layers >= whole && whole >= 3, "{}: {a:?}", path.display());
        assert_eq!(a.equal_sets, a.sets, "{}: {a:?}", path.display());
    }
}

#[test]
fn standalone_timing_of_matmuls_and_routed_experts() {
    let mut p = peer(tiny(), params());
    let g = p.graph(Workload::prefill(64)).unwrap();
    let mm = g
        .nodes
        .iter()
        .find(|n| n.op == "MUL_MAT" && n.category == Category::DenseProj)
        .unwrap();
    let req = |node, routing| OpTimingRequest {
        node,
        routing,
        recorded: None,
        layers: &[],
        seed: 3,
        warmup: 1,
        reps: 3,
    };
    let s = p.time_op(&req(mm, Routing::Realistic)).unwrap();
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|&ms| ms.is_finite() && ms > 0.0), "{s:?}");
    for c in [Category::MoeGateUp, Category::MoeDown] {
        let moe = g
            .nodes
            .iter()
            .find(|n| n.op == "MUL_MAT_ID" && n.category == c)
            .unwrap();
        for routing in [Routing::Realistic, Routing::FirstK] {
            let s = p.time_op(&req(moe, routing)).unwrap();
            assert_eq!(s.len(), 3);
            assert!(s.iter().all(|&ms| ms.is_finite() && ms > 0.0), "{s:?}");
        }
        // `model`: the recorded routing the ledger hands every engine, its table checked
        // against the op.
        let e = p.time_op(&req(moe, Routing::Model)).unwrap_err();
        assert!(e.to_string().contains("routing `model`"), "{e}");
        let k = g.engine.model.n_experts_used as usize;
        let n_experts = g.engine.model.n_experts;
        let table: Vec<u32> = (0..64 * k as u32).map(|i| (i * 5) % n_experts).collect();
        let layer = |n_tokens, ids: &[u32]| tally_ledger::routing::LayerTable {
            layer: moe.layer.unwrap(),
            n_tokens,
            ids: ids.to_vec(),
        };
        let whole = tally_ledger::routing::ModelRouting::new(
            "t".into(),
            64,
            n_experts as usize,
            k,
            vec![layer(64, &table)],
        )
        .unwrap();
        let fed = OpTimingRequest {
            recorded: Some(&whole),
            ..req(moe, Routing::Model)
        };
        assert_eq!(p.time_op(&fed).unwrap().len(), 3);
        // A routing of another prompt length has no table of the op's 64 tokens.
        let mut other = whole.clone();
        other.layers[0] = layer(63, &table[k..]);
        let fed = OpTimingRequest {
            recorded: Some(&other),
            ..req(moe, Routing::Model)
        };
        let e = p.time_op(&fed).unwrap_err();
        assert!(
            e.to_string()
                .contains("no recorded layer routed 64 tokens, as the op does"),
            "{e}"
        );
    }
    // Every other op the graph runs can be timed alone or says why not.
    for n in g.nodes.iter().filter(|n| !n.is_view) {
        match p.time_op(&req(n, Routing::Realistic)) {
            Ok(s) => assert_eq!(s.len(), 3),
            Err(SubjectError::Unsupported { .. }) => {}
            Err(e) => panic!("{}: {e}", n.name),
        }
    }
    let view = g.nodes.iter().find(|n| n.is_view).unwrap();
    let e = p.time_op(&req(view, Routing::Realistic)).unwrap_err();
    assert!(matches!(e, SubjectError::Unsupported { .. }));
    assert!(e.to_string().contains("does no work"), "{e}");
}

#[test]
fn decode_and_benches_run() {
    let mut p = peer(tiny(), params());
    let prompt = prompt(&p, 12, 4);
    let a = p.decode(&prompt, 3).unwrap();
    let b = p.decode(&prompt, 3).unwrap();
    assert!(a.wall_ms > 0.0);
    assert_eq!(a.output_digest, b.output_digest);
    let pp = p.bench_pp(16, 2, 1).unwrap();
    assert_eq!(pp.test, "pp16");
    assert_eq!(pp.samples_ms.len(), 2);
    assert!(pp.tokens_per_s().iter().all(|&t| t > 0.0));
    let tg = p.bench_tg(2, 1, 1).unwrap();
    assert_eq!(tg.test, "tg2");
    assert_eq!(tg.samples_ms.len(), 1);
    assert_eq!(p.busy_reason(), None);
}

#[test]
fn bad_inputs_are_errors_with_clear_text() {
    let e = LlamaPeer::load(Path::new("/nonexistent/model.gguf"), params())
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .starts_with("llama.cpp peer: llama.cpp could not load /nonexistent/model.gguf"),
        "{e}"
    );
    let e = LlamaPeer::load(
        tiny(),
        PeerParams {
            n_batch: 100,
            n_ubatch: 64,
            ..params()
        },
    )
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "llama.cpp peer: bad parameter: n_batch (100) must be a multiple of n_ubatch (64) so ubatch boundaries are fixed"
    );
    let e = LlamaPeer::load(
        tiny(),
        PeerParams {
            threads: 0,
            ..params()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("threads must be in 1..="), "{e}");
    let e = LlamaPeer::open(tiny(), "metal", 1).err().unwrap();
    assert_eq!(
        e.to_string(),
        "llama.cpp peer: bad parameter: unknown backend `metal` (cpu or cuda)"
    );
    // The CI build is CPU-only.
    let e = LlamaPeer::open(tiny(), "cuda", 1).err().unwrap();
    assert!(
        e.to_string()
            .contains("backend `cuda` requested, but this llama.cpp has no GPU device"),
        "{e}"
    );
    let p = LlamaPeer::open(tiny(), "cpu", 0).unwrap();
    assert_eq!(p.info().backend, "cpu");
    assert!(p.params().threads >= 1);
    drop(p);
    let mut p = peer(tiny(), params());
    let n_vocab = p.info().model.n_vocab;
    let e = p.prefill(&[], &[1, n_vocab], &RunMode::Plain).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "llama.cpp: llama.cpp peer: bad parameter: token id {n_vocab} is outside the vocabulary of {n_vocab}"
        )
    );
    let e = p.prefill(&[], &[], &RunMode::Plain).unwrap_err();
    assert!(
        e.to_string().contains("a prefill needs at least 1 token"),
        "{e}"
    );
    let e = p.graph(Workload::prefill(0)).unwrap_err();
    assert!(e.to_string().contains("at least 1 prompt token"), "{e}");
    let e = p.decode(&[1, 2], 0).unwrap_err();
    assert!(e.to_string().contains("decode needs n_gen >= 1"), "{e}");
    // A node this peer never exported cannot be timed: its op parameters are unknown.
    let g = p.graph(Workload::prefill(8)).unwrap();
    let mut node = g.nodes.iter().find(|n| n.op == "MUL_MAT").unwrap().clone();
    node.name = "not-a-node".into();
    let req = OpTimingRequest {
        node: &node,
        routing: Routing::Realistic,
        recorded: None,
        layers: &[],
        seed: 0,
        warmup: 0,
        reps: 1,
    };
    let e = p.time_op(&req).unwrap_err();
    assert!(
        e.to_string().contains("was not exported by this peer"),
        "{e}"
    );
}

/// Every quantisation mix `tally synth` writes loads in llama.cpp, and llama.cpp's logits on
/// it agree with tally's CPU backend on the same file: llama.cpp decodes our blocks to the
/// values we meant (a layout or codebook mismatch gives uncorrelated logits, relative error
/// near 1.4). The bound allows for llama.cpp's CPU matmuls quantising activations to 8 bits.
#[test]
fn every_synth_mix_loads_and_matches_tally_cpu() {
    use std::sync::Arc;
    let mut report = Vec::new();
    let mut failed = false;
    for name in [
        "q8_0",
        "q6_k",
        "q5_k_m",
        "iq4_xs",
        "iq4_nl",
        "mxfp4_moe",
        "q4_0",
        "q3_k_m",
        "q2_k",
    ] {
        let mix = QuantMix::parse(name).unwrap();
        let path = model_tagged(Preset::Tiny, mix, &[], "-mix");
        let mut p = peer(&path, params());
        let tokens = prompt(&p, 12, 5);
        let theirs = p.prefill_logits(&tokens).unwrap();
        drop(p);
        let ours = cpu_logits(Arc::new(tally_model::Model::open(&path).unwrap()), &tokens);
        let _ = std::fs::remove_file(&path);
        let err = rel_err(&ours, &theirs);
        let ok = ours.len() == theirs.len() && theirs.iter().all(|v| v.is_finite()) && err < 0.1;
        failed |= !ok;
        report.push(format!("{name:9} tally vs llama.cpp rel err {err:.4}"));
    }
    println!("{}", report.join("\n"));
    assert!(!failed, "{}", report.join("\n"));
}
