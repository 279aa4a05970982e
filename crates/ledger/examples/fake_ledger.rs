//! The whole method on two deterministic fake engines: prints the ledger and writes its
//! Markdown, JSON and SVG renderings into the directory given as the first argument (default:
//! the system temp directory).
//!
//! `cargo run -p tally-ledger --example fake_ledger -- /tmp/ledger-demo`

use std::path::PathBuf;

use tally_ledger::Category;
use tally_ledger::fake::{FakeCosts, FakeSubject, ToyGraph, toy_graph};
use tally_ledger::machine::local_machine;
use tally_ledger::noise::ProbeChoice;
use tally_ledger::{MeasureConfig, build_ledger, measure_pair, report};

fn costs(dense_ms: f64, gate_up_ms: f64) -> FakeCosts {
    let mut c = FakeCosts {
        observe_barrier_ms: 0.01,
        replay_barrier_ms: 0.01,
        ..FakeCosts::default()
    };
    for (cat, ms) in [
        (Category::Embedding, 0.2),
        (Category::Norm, 0.1),
        (Category::DenseProj, dense_ms),
        (Category::Layout, 0.3),
        (Category::Attention, 0.4),
        (Category::Elementwise, 0.05),
        (Category::Router, 0.1),
        (Category::MoeGateUp, gate_up_ms),
        (Category::MoeDown, 1.0),
        (Category::OutputHead, 0.6),
    ] {
        c.node_ms.insert(cat, ms);
    }
    c
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    let mut ours = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "tally".into(),
            ..ToyGraph::default()
        }),
        costs(0.5, 2.0),
    );
    let mut peer = FakeSubject::new(
        toy_graph(&ToyGraph {
            engine: "llama.cpp".into(),
            dense_quant: ("q8_0", 32, 34),
            last_layer_all_rows: false,
            ..ToyGraph::default()
        }),
        costs(0.25, 2.5),
    );
    peer.costs.standalone_ratio.insert(Category::DenseProj, 2.0);
    let mut machine = local_machine();
    machine.peak_gbps = Some(1000.0);
    machine.peak_tflops = Some(100.0);
    machine.peak_method = Some("made up for the demo".into());
    let mut cfg = MeasureConfig::new(8, machine);
    cfg.noise.probe = ProbeChoice::Off;
    cfg.n_gen = 4;
    if let Some(o) = cfg.opbench.as_mut() {
        o.first_k = true;
    }
    let (a, b) = measure_pair(&mut ours, &mut peer, &cfg)?;
    let ledger = build_ledger(&a, &b);
    print!("{}", report::render_terminal(&ledger));
    println!();
    print!("{}", report::render_measurement(&a));
    std::fs::write(dir.join("ledger-pp8.md"), report::render_markdown(&ledger))?;
    std::fs::write(dir.join("ledger-pp8.json"), report::render_json(&ledger)?)?;
    std::fs::write(dir.join("ledger-pp8.svg"), report::render_svg(&ledger))?;
    eprintln!("wrote ledger-pp8.{{md,json,svg}} to {}", dir.display());
    Ok(())
}
