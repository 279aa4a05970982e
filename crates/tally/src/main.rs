//! tally: a prefill-first inference engine for Qwen3.6-35B-A3B that keeps a ledger against
//! llama.cpp. See `tally --help`.

mod cmd;
mod exit;

use clap::{Parser, Subcommand};

/// A prefill-first engine for Qwen3.6-35B-A3B (GGUF `qwen35moe`) with a ledger: it measures
/// itself and llama.cpp on the same GGUF file, operator category by category, the same way.
///
/// Typical session:
///   tally synth --preset tiny --quant q8_0 --out tiny.gguf     # a small model with random weights
///   tally run --model tiny.gguf --tokens 64 -n 8               # prefill 64 tokens, decode 8
#[derive(Parser)]
#[command(name = "tally", version, about, long_about, propagate_version = true)]
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
    Opbench(cmd::measure::Args),
    Replay(cmd::measure::Args),
    Measure(cmd::measure::Args),
    Ledger(cmd::ledger::Args),
    Bench(cmd::bench::Args),
    Machine(cmd::machine::Args),
    Generate(cmd::generate::Args),
    Chat(cmd::chat::Args),
    Tokenize(cmd::tokenize::Args),
    Serve(cmd::serve::Args),
}

fn main() {
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
        Command::Generate(a) => cmd::generate::main(a),
        Command::Chat(a) => cmd::chat::main(a),
        Command::Tokenize(a) => cmd::tokenize::main(a),
        Command::Serve(a) => cmd::serve::main(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(exit::code(&e));
    }
}
