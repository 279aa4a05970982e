//! The ledger's tally subject: the model routing it records for standalone MoE timings.

mod common;

use common::{random_ids, session, synth_model};
use tally_engine::exec::Capture;
use tally_engine::subject::TallySubject;
use tally_ledger::Category;
use tally_ledger::schema::Routing;
use tally_ledger::subject::{OpTimingRequest, Subject, Workload};
use tally_model::Op;
use tally_model::synth::{Preset, QuantMix};

/// The recorded tables are the router's own choice: per token, the k experts of the highest
/// router logits, computed here from the logits a separate hooked run reads back; every MoE
/// layer is there once, after a context too. Then a standalone MoE timing takes the table
/// (and refuses one of the wrong shape).
#[test]
fn model_routing_is_the_routers_choice_and_feeds_the_standalone_op() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 11);
    let c = &model.config;
    let (e, k) = (c.n_experts, c.n_experts_used);
    let ids = random_ids(15, c.vocab, 3);
    let (context, batch) = ids.split_at(5);
    let mut subject = TallySubject::new(session(&model, 64), "test".into());
    let rec = subject
        .model_routing(context, batch)
        .expect("record")
        .expect("tally records a routing");
    assert_eq!((rec.n_tokens, rec.n_experts, rec.k), (10, e, k));
    assert_eq!(rec.recorded_by, "tally");

    // The same run, hooked independently: the router logits of every top-k node.
    let mut s = session(&model, 64);
    s.prefill(context).expect("context");
    let plan = s.plan(batch.len()).expect("plan");
    let mut cap = Capture::topk(&plan, true);
    s.append_with(batch, &mut cap).expect("run");
    let moe_layers: Vec<u32> = plan
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::TopK { .. }))
        .map(|n| n.layer.expect("a layer") as u32)
        .collect();
    assert!(moe_layers.len() >= 2);
    let got_layers: Vec<u32> = rec.layers.iter().map(|t| t.layer).collect();
    assert_eq!(got_layers, moe_layers);
    let mut logits_of_layer = cap
        .values
        .iter()
        .filter(|(l, _)| l.ends_with(":logits"))
        .map(|(_, v)| v);
    for t in &rec.layers {
        let logits = logits_of_layer.next().expect("logits of each top-k node");
        // Whole-batch tables, but the last layer's: a prefill's last layer routes only the
        // last token (the rows the logits need).
        let rows = if t.layer == *moe_layers.last().expect("a layer") {
            1
        } else {
            10
        };
        assert_eq!(
            (t.n_tokens, logits.len()),
            (rows, rows * e),
            "layer {}",
            t.layer
        );
        for (tok, row) in logits.chunks(e).enumerate() {
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            let mut want: Vec<u32> = order[..k].iter().map(|&x| x as u32).collect();
            let mut got = t.ids[tok * k..(tok + 1) * k].to_vec();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "layer {} token {tok}", t.layer);
        }
    }

    // A standalone timing of a routed op takes the recorded table.
    let g = subject.graph(Workload::prefill(10)).expect("graph");
    let moe = g
        .nodes
        .iter()
        .find(|n| n.category == Category::MoeGateUp && !n.is_view)
        .expect("a gate/up node");
    let layers = [moe.layer.expect("layer")];
    let req = |recorded| OpTimingRequest {
        node: moe,
        routing: Routing::Model,
        recorded,
        layers: &layers,
        seed: 1,
        warmup: 0,
        reps: 2,
    };
    assert_eq!(subject.time_op(&req(Some(&rec))).expect("timed").len(), 2);
    // A routing recorded for another prompt length has no table of the op's 10 tokens.
    let mut short = rec.clone();
    short.layers.retain(|t| t.n_tokens != 10);
    let e = subject.time_op(&req(Some(&short))).unwrap_err();
    assert!(
        e.to_string()
            .contains("no recorded layer routed 10 tokens, as the op does"),
        "{e}"
    );
    let e = subject.time_op(&req(None)).unwrap_err();
    assert!(e.to_string().contains("routing `model`"), "{e}");
}
