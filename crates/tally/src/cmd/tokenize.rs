//! `tally tokenize`: the file's tokenizer on a text, ids and pieces.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;
use tally_gguf::GgufFile;
use tally_text::Tokenizer;

use super::{Format, InputError};

/// Tokenize a text with the GGUF's own tokenizer (tokenizer.ggml.*). Reads only the metadata,
/// so vocab-only files work as well as full models.
///
/// Examples:
///   tally tokenize --model ggml-vocab-qwen35.gguf --text "Hello, world!"
///   tally tokenize --model model.gguf --file prompt.txt -o json
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (a model or a vocab-only file).
    #[arg(long)]
    model: PathBuf,
    /// The text to tokenize.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    text: Option<String>,
    /// Read the text from this file (its bytes as they are; invalid UTF-8 reads as U+FFFD).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Tokenize special-token text such as `<|im_start|>` as ordinary text.
    #[arg(long)]
    no_special: bool,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

#[derive(Serialize)]
struct Token {
    id: u32,
    /// The token's bytes as text (U+FFFD where a token holds part of a character).
    piece: String,
    /// Set when `piece` is not the exact bytes: a character split across tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<Vec<u8>>,
    special: bool,
}

#[derive(Serialize)]
struct Report {
    model: String,
    pre_tokenizer: String,
    vocab_size: usize,
    input_bytes: usize,
    n_tokens: usize,
    ids: Vec<u32>,
    tokens: Vec<Token>,
}

pub fn main(a: Args) -> Result<()> {
    let input: Vec<u8> = match (&a.text, &a.file) {
        (Some(t), _) => t.as_bytes().to_vec(),
        (None, Some(f)) => std::fs::read(f)
            .map_err(|e| InputError(format!("cannot read --file {}: {e}", f.display())))?,
        (None, None) => return Err(InputError("give --text or --file".into()).into()),
    };
    let file = GgufFile::open(&a.model)?;
    let tok = Tokenizer::from_gguf(&file)
        .with_context(|| format!("reading the tokenizer of {}", a.model.display()))?;
    let ids = tok.encode_bytes(&input, !a.no_special);
    let tokens: Vec<Token> = ids
        .iter()
        .map(|&id| {
            let raw = tok.token_piece(id);
            let piece = String::from_utf8_lossy(raw).into_owned();
            Token {
                id,
                bytes: (piece.as_bytes() != raw).then(|| raw.to_vec()),
                piece,
                special: tok.is_control(id),
            }
        })
        .collect();
    let report = Report {
        model: a.model.display().to_string(),
        pre_tokenizer: format!("{:?}", tok.pre_tokenizer()).to_lowercase(),
        vocab_size: tok.vocab_size(),
        input_bytes: input.len(),
        n_tokens: ids.len(),
        ids,
        tokens,
    };
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => {
            for t in &report.tokens {
                match &t.bytes {
                    Some(b) => println!("{:>8}  {:?}  bytes {b:02x?}", t.id, t.piece),
                    None => println!("{:>8}  {:?}", t.id, t.piece),
                }
            }
            println!(
                "{} tokens from {} bytes ({}, vocabulary {})",
                report.n_tokens, report.input_bytes, report.pre_tokenizer, report.vocab_size
            );
        }
        Format::Md => {
            println!("| # | id | piece |\n|---:|---:|---|");
            for (i, t) in report.tokens.iter().enumerate() {
                let piece = format!("{:?}", t.piece).replace('|', "\\|");
                println!("| {i} | {} | `{piece}` |", t.id);
            }
        }
    }
    Ok(())
}
