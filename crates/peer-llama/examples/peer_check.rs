//! Exercises the llama.cpp peer on one model file and prints what the ledger would consume:
//! graph counts against the architecture, dead work, replay validation, standalone op timings
//! and llama-bench style pp/tg runs. Meant for a first look on a new machine (CPU or GPU).
//!
//! `cargo run --release -p tally-peer-llama --example peer_check -- MODEL.gguf [N_TOKENS] [REPS]`

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;

use tally_ledger::Category;
use tally_ledger::deadwork::dead_work;
use tally_ledger::graph::check_graph;
use tally_ledger::schema::Routing;
use tally_ledger::subject::{OpTimingRequest, RunMode, Subject, Workload};
use tally_peer_llama::{LlamaPeer, PeerParams};

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: peer_check MODEL.gguf [N_TOKENS] [REPS]")?;
    let n: usize = args.next().map_or(Ok(512), |s| s.parse())?;
    let reps: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let mut p = LlamaPeer::load(path.as_ref(), PeerParams::default())?;
    let info = p.info();
    println!(
        "{} | {} | {} | {}",
        info.engine, info.version, info.backend, info.device
    );

    let g = p.graph(Workload::prefill(n))?;
    let mut per: BTreeMap<Category, (u64, u64)> = BTreeMap::new();
    for node in &g.nodes {
        let e = per.entry(node.category).or_default();
        if node.is_view { e.1 += 1 } else { e.0 += 1 }
    }
    let views = g.nodes.iter().filter(|n| n.is_view).count();
    println!(
        "\ngraph pp{n}: {} nodes, {views} views/no-ops, {} work",
        g.nodes.len(),
        g.nodes.len() - views
    );
    for (c, (w, v)) in &per {
        println!("  {:14} work {w:5}  views {v:5}", c.name());
    }
    let report = check_graph(&g);
    println!(
        "architecture check: {}",
        if report.ok() { "ok" } else { "MISMATCH" }
    );
    for e in &g.expected {
        println!(
            "  {:32} expected {:5}  ({})",
            e.what, e.expected, e.derivation
        );
    }
    let dw = dead_work(&g);
    println!(
        "dead work: {} dead, {} partial nodes; {:.1}% of FLOPs, {:.1}% of bytes",
        dw.dead.len(),
        dw.partial.len(),
        100.0 * dw.wasted_flops_ratio(),
        100.0 * dw.wasted_bytes_ratio()
    );

    for note in &g.notes {
        println!("note: {note}");
    }

    let tokens = tally_ledger::rng::prompt_tokens(n, info.model.n_vocab, 1)?;
    let all: BTreeSet<Category> = g
        .nodes
        .iter()
        .filter(|n| !n.is_view)
        .map(|n| n.category)
        .collect();
    // Median wall time of `reps` runs and the digest of every run (None when they differ).
    let walls = |mode: &RunMode, p: &mut LlamaPeer| -> Result<(f64, Option<u64>), Box<dyn Error>> {
        let mut w = Vec::new();
        let mut digests = BTreeSet::new();
        // Two untimed runs first: ggml-cuda captures a CUDA graph only on the third call of an
        // unchanged graph, and a split graph's segments are new graphs.
        for _ in 0..2 {
            p.prefill(&[], &tokens, mode)?;
        }
        for _ in 0..reps {
            let r = p.prefill(&[], &tokens, mode)?;
            digests.insert(r.output_digest);
            w.push(r.wall_ms);
        }
        Ok((
            median(&w),
            (digests.len() == 1)
                .then(|| digests.into_iter().next())
                .flatten(),
        ))
    };
    let (plain_ms, plain_d) = walls(&RunMode::Plain, &mut p)?;
    let (obs_ms, obs_d) = walls(&RunMode::Observe(all.clone()), &mut p)?;
    println!(
        "\nprefill pp{n}: plain {plain_ms:.2} ms (digest stable over {reps} runs: {}), observe-all {obs_ms:.2} ms (stable: {}, equal to plain: {})",
        plain_d.is_some(),
        obs_d.is_some(),
        plain_d.is_some() && plain_d == obs_d
    );
    for times in [1, 2, 4] {
        let (ms, d) = walls(
            &RunMode::Replay {
                categories: all.clone(),
                times,
            },
            &mut p,
        )?;
        println!(
            "  replay all x{times}: {ms:.2} ms, increment {:.2} ms (digest equal to observe: {}, aliased nodes {})",
            ms - obs_ms,
            d.is_some() && d == obs_d,
            p.last_replay().aliased.len()
        );
    }
    p.set_replay_verify(true);
    p.prefill(
        &[],
        &tokens,
        &RunMode::Replay {
            categories: all.clone(),
            times: 1,
        },
    )?;
    let v = p.last_replay().clone();
    p.set_replay_verify(false);
    println!(
        "  replay verification: {} nodes' scratch output compared with the real output, {} differ {:?}, {} in-place (not comparable)",
        v.verified,
        v.mismatched.len(),
        v.mismatched.iter().take(5).collect::<Vec<_>>(),
        v.aliased.len()
    );
    let mut sum = 0.0;
    for c in &all {
        let set = BTreeSet::from([*c]);
        let (o, od) = walls(&RunMode::Observe(set.clone()), &mut p)?;
        let (r, rd) = walls(
            &RunMode::Replay {
                categories: set,
                times: 1,
            },
            &mut p,
        )?;
        sum += r - o;
        println!(
            "  {:14} observe {o:8.3}  replay {r:8.3}  increment {:8.3} ms  replay==observe {}  observe==plain {}  aliased {}",
            c.name(),
            r - o,
            rd.is_some() && rd == od,
            od.is_some() && od == plain_d,
            p.last_replay().aliased.len()
        );
    }
    println!("  sum of increments {sum:.3} ms vs plain {plain_ms:.3} ms");

    println!("\nstandalone (median of {reps}, after 2 warm-ups):");
    let mut seen = BTreeSet::new();
    for node in g.nodes.iter().filter(|n| !n.is_view) {
        let key = (
            node.op.clone(),
            format!(
                "{:?}",
                node.inputs
                    .iter()
                    .map(|i| (&i.tensor.shape, &i.tensor.dtype))
                    .collect::<Vec<_>>()
            ),
        );
        if !seen.insert(key) {
            continue;
        }
        let routings: &[Routing] = if node.op == "MUL_MAT_ID" {
            &[Routing::Realistic, Routing::FirstK]
        } else {
            &[Routing::Realistic]
        };
        for &routing in routings {
            let req = OpTimingRequest {
                node,
                routing,
                recorded: None,
                layers: &[],
                seed: 5,
                warmup: 2,
                reps,
            };
            match p.time_op(&req) {
                Ok(s) => println!(
                    "  {:16} {:14} {:40} {:10} {:9.4} ms",
                    node.op,
                    node.category.name(),
                    node.name,
                    routing.name(),
                    median(&s)
                ),
                Err(e) => println!(
                    "  {:16} {:14} {:40} {e}",
                    node.op,
                    node.category.name(),
                    node.name
                ),
            }
        }
    }

    let pp = p.bench_pp(n, reps, 1)?;
    let tg = p.bench_tg(32, reps, 1)?;
    println!(
        "\nllama-bench style: {} {:.1} tok/s, {} {:.1} tok/s (medians)",
        pp.test,
        median(&pp.tokens_per_s()),
        tg.test,
        median(&tg.tokens_per_s())
    );
    if let Some(b) = p.busy_reason() {
        println!("machine busy: {b}");
    }
    Ok(())
}
