//! llama.cpp's own quantiser on one file, as `llama-quantize IN OUT TYPE` runs it without an
//! importance matrix, for files whose every block was chosen by llama.cpp rather than by tally
//! (scripts/gpu/make-llama-quantized.sh makes the CUDA check's files with it):
//!
//!     cargo run --release -p tally-peer-llama --example quantize -- IN.gguf OUT.gguf q4_k_m [THREADS]
//!
//! TYPE is one of `tally synth --quant`'s mixes. Exit status 1 with a message on any error.

use std::path::Path;

use tally_model::synth::QuantMix;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let [inp, out, mix, rest @ ..] = args else {
        return Err("usage: quantize IN.gguf OUT.gguf TYPE [THREADS]".into());
    };
    let mix = QuantMix::parse(mix).ok_or_else(|| {
        format!(
            "unknown type `{mix}` (choose one of {})",
            QuantMix::NAMES.join(", ")
        )
    })?;
    let threads = match rest {
        [] => std::thread::available_parallelism().map_or(1, |n| n.get()),
        [t] => t
            .parse()
            .map_err(|_| format!("THREADS `{t}` is not a count"))?,
        _ => return Err("usage: quantize IN.gguf OUT.gguf TYPE [THREADS]".into()),
    };
    tally_peer_llama::quantize_file(Path::new(inp), Path::new(out), mix.file_type(), threads)
        .map_err(|e| e.to_string())
}
