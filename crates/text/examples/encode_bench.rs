//! Encode throughput on one thread, release build: a benchmark, not a test.
//!
//! ```sh
//! eval "$(scripts/setup-llama-vocab.sh)"
//! cargo run --release -p tally-text --example encode_bench -- \
//!     "$TALLY_LLAMA_VOCAB_DIR/ggml-vocab-qwen35.gguf" [--repeats N] [TEXT_FILE...]
//! ```
//!
//! Without text files it encodes a fixed mix of a few MB (built the same way on every run, see
//! [`default_mix`]): the repository's own Rust, Python, shell and Markdown (English prose and
//! code), the tokenizer test corpus (42 cases: CJK, Cyrillic, Khmer, Arabic, emoji and ZWJ
//! sequences, whitespace runs, CRLF, special tokens), and generated text in many scripts whose
//! words rarely repeat (so the per-call word cache helps little: the pessimistic part). Each
//! part is encoded on its own, then the whole mix in one call; every measurement is one
//! `Tokenizer::encode` call on the calling thread (the tokenizer does not spawn threads), repeated
//! N times (default 7), reported as the median (and min..max) in MB/s, 10^6 bytes of UTF-8 input
//! per second, by the wall clock and by the thread's own time on a CPU (Linux schedstat; on a
//! machine shared with other work the wall clock also counts waiting for a core).

use std::path::{Path, PathBuf};
use std::time::Instant;

use tally_text::Tokenizer;

/// A small deterministic generator (xorshift64), so the generated part is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn char_in(&mut self, lo: u32, hi: u32) -> char {
        let c = lo + self.below(u64::from(hi - lo + 1)) as u32;
        char::from_u32(c).unwrap_or('?')
    }
}

/// Text in many scripts, `bytes` long (about): Latin words with accents, Cyrillic and Greek
/// words, CJK runs without spaces and CJK punctuation, Hangul, Arabic, Devanagari, numbers,
/// identifiers and operators, emoji with skin tones and ZWJ sequences, whitespace runs and
/// CRLF line ends.
fn generated(bytes: usize) -> String {
    let mut r = Rng(0x2026_1201_7A11_u64);
    let mut s = String::with_capacity(bytes + 64);
    let word = |r: &mut Rng, s: &mut String, lo: u32, hi: u32, min: u64, max: u64| {
        for _ in 0..min + r.below(max - min + 1) {
            s.push(r.char_in(lo, hi));
        }
    };
    while s.len() < bytes {
        match r.below(16) {
            0..=3 => {
                s.push(' ');
                word(&mut r, &mut s, 'a' as u32, 'z' as u32, 1, 10);
                if r.below(8) == 0 {
                    s.push(r.char_in(0xE0, 0xFC));
                }
            }
            4 => {
                s.push(' ');
                word(&mut r, &mut s, 0x430, 0x44F, 2, 10);
            }
            5 => {
                s.push(' ');
                word(&mut r, &mut s, 0x3B1, 0x3C9, 2, 9);
            }
            6 | 7 => {
                word(&mut r, &mut s, 0x4E00, 0x9FFF, 2, 24);
                s.push(['，', '。', '、', '：'][r.below(4) as usize]);
            }
            8 => {
                word(&mut r, &mut s, 0x3041, 0x3096, 2, 8);
                word(&mut r, &mut s, 0xAC00, 0xD7A3, 2, 6);
            }
            9 => {
                s.push(' ');
                word(&mut r, &mut s, 0x627, 0x64A, 2, 8);
                s.push(' ');
                word(&mut r, &mut s, 0x915, 0x939, 1, 4);
                s.push('\u{94D}');
                word(&mut r, &mut s, 0x915, 0x939, 1, 3);
            }
            10 => {
                s.push(' ');
                s.push_str(&r.below(1_000_000_000).to_string());
                s.push(['.', ',', '%', ' '][r.below(4) as usize]);
            }
            11 => {
                s.push_str(" let ");
                word(&mut r, &mut s, 'a' as u32, 'z' as u32, 1, 6);
                s.push('_');
                word(&mut r, &mut s, 'a' as u32, 'z' as u32, 1, 6);
                s.push_str([" = (", " += ", " -> ", "::<", " != "][r.below(5) as usize]);
                s.push_str(&r.below(4096).to_string());
                s.push_str(");");
            }
            12 => {
                s.push(' ');
                s.push(r.char_in(0x1F600, 0x1F64F));
                match r.below(3) {
                    0 => s.push(r.char_in(0x1F3FB, 0x1F3FF)),
                    1 => {
                        s.push('\u{200D}');
                        s.push(r.char_in(0x1F300, 0x1F5FF));
                    }
                    _ => {}
                }
            }
            13 => s.push_str(["\n", "\r\n", "\n\n", "\n    ", "\t", "   "][r.below(6) as usize]),
            _ => s.push_str([". ", ", ", "; ", "! ", "? ", " (", ") ", " \""][r.below(8) as usize]),
        }
    }
    s
}

/// The repository's own text files (English prose and code), in sorted path order, up to
/// `cap` bytes.
fn repository_text(root: &Path, cap: usize) -> std::io::Result<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "fixtures" {
                    walk(&p, out)?;
                }
            } else if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("rs" | "py" | "sh" | "md" | "toml" | "cu")
            ) {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    let mut s = String::new();
    for f in files {
        if s.len() >= cap {
            break;
        }
        if let Ok(t) = std::fs::read_to_string(&f) {
            s.push_str(&t);
        }
    }
    Ok(s)
}

/// The test corpus's cases, one per line, repeated to `bytes`.
fn corpus_text(bytes: usize) -> Result<String, Box<dyn std::error::Error>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut one = String::new();
    for c in v["cases"].as_array().ok_or("corpus.json: no cases")? {
        one.push_str(c["text"].as_str().unwrap_or_default());
        one.push('\n');
    }
    Ok(one.repeat(bytes / one.len() + 1))
}

/// The default mix: (name, text) parts.
fn default_mix() -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Ok(vec![
        (
            "repository code + prose".into(),
            repository_text(&root, 2_500_000)?,
        ),
        ("test corpus (repeated)".into(), corpus_text(500_000)?),
        ("generated, many scripts".into(), generated(1_500_000)),
    ])
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds this thread has run on a CPU (Linux: /proc/thread-self/schedstat), `None` elsewhere.
/// On a machine shared with other work, wall time also counts the time the thread waited for a
/// core; this does not.
fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// Median, min and max.
fn stats(mut v: Vec<f64>) -> [f64; 3] {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &r| (a.min(r), b.max(r)));
    [median(&mut v), lo, hi]
}

/// Encodes `text` `repeats` times; returns (tokens, wall MB/s and on-CPU MB/s as median, min,
/// max; the second `None` without schedstat).
fn measure(
    tok: &Tokenizer,
    text: &str,
    special: bool,
    repeats: usize,
) -> (usize, [f64; 3], Option<[f64; 3]>) {
    let mb = text.len() as f64 / 1e6;
    let (mut wall, mut cpu) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    let mut n = 0;
    for _ in 0..repeats {
        let c0 = thread_cpu_seconds();
        let t = Instant::now();
        n = std::hint::black_box(tok.encode(std::hint::black_box(text), special)).len();
        wall.push(mb / t.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (c0, thread_cpu_seconds()) {
            cpu.push(mb / (b - a).max(1e-9));
        }
    }
    let cpu = (cpu.len() == repeats).then(|| stats(cpu));
    (n, stats(wall), cpu)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: encode_bench VOCAB.gguf [--repeats N] [TEXT_FILE...]";
    let vocab = args.next().ok_or(usage)?;
    let mut repeats = 7usize;
    let mut files = Vec::new();
    while let Some(a) = args.next() {
        if a == "--repeats" {
            repeats = args.next().ok_or(usage)?.parse()?;
            if repeats == 0 {
                return Err("--repeats must be at least 1".into());
            }
        } else {
            files.push(a);
        }
    }
    let file = tally_gguf::GgufFile::open(Path::new(&vocab))?;
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&file)?;
    println!(
        "{vocab}: {} tokens, {} merges, loaded in {:.0} ms",
        tok.vocab_size(),
        tok.n_merges(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    let parts = if files.is_empty() {
        default_mix()?
    } else {
        files
            .iter()
            .map(|f| Ok((f.clone(), std::fs::read_to_string(f)?)))
            .collect::<Result<_, std::io::Error>>()?
    };
    let all: String = parts.iter().map(|(_, t)| t.as_str()).collect();
    println!(
        "one thread, {repeats} repeats per row, MB/s median (min..max) by the wall clock and by \
         the thread's time on a CPU; parse_special=true unless said"
    );
    let row = |name: &str, text: &str, special: bool| {
        let (n, [med, lo, hi], cpu) = measure(&tok, text, special, repeats);
        let cpu = cpu.map_or(String::new(), |[m, l, h]| {
            format!(", on-CPU {m:6.1} ({l:.1}..{h:.1})")
        });
        println!(
            "  {name:<31} {:>5.2} MB {:>8} tokens ({:.2} B/token): wall {med:6.1} ({lo:.1}..{hi:.1}){cpu}",
            text.len() as f64 / 1e6,
            n,
            text.len() as f64 / n.max(1) as f64
        );
    };
    for (name, text) in &parts {
        row(name, text, true);
    }
    row("all of it, one call", &all, true);
    row("all of it, parse_special=false", &all, false);
    Ok(())
}
