//! tally: a prefill-first inference engine for Qwen3.6-35B-A3B that keeps a ledger against
//! llama.cpp. See `tally --help`.

mod cmd;
mod exit;
mod signals;

use clap::{Parser, Subcommand};

/// A prefill-first engine for Qwen3.6-35B-A3B (GGUF `qwen35moe`) with a ledger: it measures
/// itself and llama.cpp on the same GGUF file, operator category by category, the same way.
#[derive(Parser)]
#[command(
    name = "tally",
    version,
    about,
    long_about,
    propagate_version = true,
    after_help = "Typical session:
  tally synth --preset tiny --quant q8_0 --out tiny.gguf   # a small model with random weights
  tally run --model tiny.gguf --tokens 64 -n 8             # prefill 64 tokens, decode 8
  tally ledger --model tiny.gguf --peer llama.cpp          # where the gap to llama.cpp lives

Exit codes:
  0  success
  1  a failure of the machine or of tally itself
  2  bad input: the model file, an argument or the prompt (the message names it); also a model
     file truncated or overwritten while tally had it mapped
  3  no verdict: the measurements ran and the reports were written, but a validation failed or
     the noise gate ran out of retries (the affected rows and the headline say \"no verdict\")"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Synth(cmd::synth::Args),
    Run(cmd::run::Args),
    Check(cmd::check::Args),
    Graph(cmd::graph::Args),
    Info(cmd::info::Args),
    /// Standalone timing of every op of the plan, per category (the ledger's opbench protocol).
    ///
    /// Each op runs alone on synthetic inputs of its real shape, --op-reps times per window,
    /// noise-gated; MoE ops use a realistic routing (see --routing).
    #[command(after_help = "Example:\n  tally opbench --model tiny.gguf -p 512 -r 5")]
    Opbench(cmd::measure::Args),
    /// In-graph replay: re-runs each category's nodes inside the real forward pass and times them.
    ///
    /// The replay validations (replayed outputs equal the real ones, category times add up to
    /// the end-to-end time) are reported; a failed one means the figures are not trusted.
    #[command(after_help = "Example:\n  tally replay --model tiny.gguf -p 512 -r 5")]
    Replay(cmd::measure::Args),
    /// Every protocol on tally alone: graph, end to end, standalone ops, in-graph replay.
    ///
    /// Writes tally-BACKEND-ppN.measurement.json, which `tally ledger A B` compares. With
    /// --step-at D it measures one decode step after D context tokens instead
    /// (tally-BACKEND-step-dD.measurement.json).
    #[command(
        after_help = "Examples:\n  tally measure --model tiny.gguf -p 512 --out-dir out\n  tally measure --model tiny.gguf --step-at 512 --out-dir out"
    )]
    Measure(cmd::measure::Args),
    Ledger(cmd::ledger::Args),
    Bench(cmd::bench::Args),
    Machine(cmd::machine::Args),
    Kernels(cmd::kernels::Args),
    Generate(cmd::generate::Args),
    Chat(cmd::chat::Args),
    Tokenize(cmd::tokenize::Args),
    Serve(cmd::serve::Args),
}

fn main() {
    signals::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Synth(a) => cmd::synth::main(a),
        Command::Run(a) => cmd::run::main(a),
        Command::Check(a) => cmd::check::main(a),
        Command::Graph(a) => cmd::graph::main(a),
        Command::Info(a) => cmd::info::main(a),
        Command::Opbench(a) => cmd::measure::main(a, cmd::measure::Protocols::Opbench),
        Command::Replay(a) => cmd::measure::main(a, cmd::measure::Protocols::Replay),
        Command::Measure(a) => cmd::measure::main(a, cmd::measure::Protocols::All),
        Command::Ledger(a) => cmd::ledger::main(a),
        Command::Bench(a) => cmd::bench::main(a),
        Command::Machine(a) => cmd::machine::main(a),
        Command::Kernels(a) => cmd::kernels::main(a),
        Command::Generate(a) => cmd::generate::main(a),
        Command::Chat(a) => cmd::chat::main(a),
        Command::Tokenize(a) => cmd::tokenize::main(a),
        Command::Serve(a) => cmd::serve::main(a),
    };
    if let Err(e) = result {
        eprintln!("error: {}", exit::render(&e));
        std::process::exit(exit::code(&e));
    }
}
