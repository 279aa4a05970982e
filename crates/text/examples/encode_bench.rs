//! Encode throughput on one core: `cargo run --release -p tally-text --example encode_bench --
//! VOCAB.gguf [TEXT_FILE]`. Without a text file it encodes the test corpus repeated to ~8 MB
//! (mixed scripts, code, digits, whitespace). Prints MB/s (10^6 bytes of UTF-8 input per
//! second) over several runs; a benchmark, not a test.

use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let vocab = args
        .get(1)
        .ok_or("usage: encode_bench VOCAB.gguf [TEXT_FILE]")?;
    let file = tally_gguf::GgufFile::open(Path::new(vocab))?;
    let t0 = Instant::now();
    let tok = tally_text::Tokenizer::from_gguf(&file)?;
    println!(
        "loaded {} tokens in {:.0} ms",
        tok.vocab_size(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    let text = match args.get(2) {
        Some(p) => std::fs::read_to_string(p)?,
        None => {
            let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus.json");
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(corpus)?)?;
            let mut one = String::new();
            for c in v["cases"].as_array().ok_or("corpus")? {
                one.push_str(c["text"].as_str().unwrap_or_default());
                one.push('\n');
            }
            one.repeat(8_000_000 / one.len() + 1)
        }
    };
    for parse_special in [true, false] {
        let mut best = 0f64;
        let mut n = 0;
        for _ in 0..5 {
            let t = Instant::now();
            n = tok.encode(&text, parse_special).len();
            best = best.max(text.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
        println!(
            "parse_special={parse_special}: {:.1} MB in, {n} tokens out, best of 5: {best:.1} MB/s",
            text.len() as f64 / 1e6
        );
    }
    Ok(())
}
