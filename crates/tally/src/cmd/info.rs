//! `tally info`: what a `qwen35moe` GGUF holds and what tally will use of it.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use anyhow::Result;
use tally_gguf::{GgufFile, MetaValue};
use tally_model::{LayerKind, Model};

use super::Format;
use super::common::open_model;

/// Describe a model file: architecture and size label, trunk and MTP layers, tensor types
/// (count, bytes, bits per weight), tokenizer and chat template, and what tally uses.
///
/// The file is validated as `tally run` would load it: a file tally cannot load is an error
/// (exit code 2) that names what is wrong.
///
/// Example: tally info --model Qwen3.6-35B-A3B-Q4_K_M.gguf -o json
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (of a split model, the first part: NAME-00001-of-0000N.gguf).
    #[arg(long)]
    model: PathBuf,
    /// Report format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

/// Tensors of one ggml type.
#[derive(Debug, Default, serde::Serialize)]
struct TypeRow {
    tensors: usize,
    /// Data bytes.
    bytes: u64,
    /// Elements.
    params: u64,
    /// `8 * bytes / params`.
    bits_per_weight: f64,
}

#[derive(Debug, serde::Serialize)]
struct Tokenizer {
    /// `tokenizer.ggml.model` (`gpt2` in released files, `none` in synthetic ones).
    model: String,
    /// Entries of `tokenizer.ggml.tokens`, if the file lists them.
    tokens: Option<usize>,
    /// Entries of `tokenizer.ggml.merges`, if any.
    merges: Option<usize>,
    /// `tokenizer.ggml.pre` (the pre-tokenizer; `qwen35` for this model).
    pre: Option<String>,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    path: String,
    /// The model's files: the path above, then the other parts of a split model.
    parts: Vec<String>,
    file_bytes: u64,
    architecture: String,
    name: Option<String>,
    size_label: Option<String>,
    /// `general.file_type` (llama.cpp's ftype number).
    file_type: Option<u64>,
    quantization_version: Option<u64>,
    block_count: usize,
    trunk_layers: usize,
    full_attention_layers: usize,
    linear_attention_layers: usize,
    mtp_layers: usize,
    hidden: usize,
    vocab: usize,
    experts: usize,
    experts_used: usize,
    context_length: usize,
    /// Every tensor in the file, by type name.
    types: BTreeMap<String, TypeRow>,
    tensors: usize,
    params: u64,
    bits_per_weight: f64,
    tokenizer: Option<Tokenizer>,
    /// Bytes of `tokenizer.chat_template`, if present.
    chat_template_bytes: Option<usize>,
    /// What tally does with each part of the file, one line each.
    uses: Vec<String>,
    /// Tensors no part of tally reads (neither the trunk nor an MTP block).
    unused_tensors: Vec<String>,
}

fn text(f: &GgufFile, key: &str) -> Option<String> {
    f.get(key).and_then(MetaValue::as_str).map(str::to_string)
}

fn array_len(f: &GgufFile, key: &str) -> Option<usize> {
    f.get(key).and_then(MetaValue::as_array).map(|a| a.len())
}

fn report(m: &Model) -> Report {
    let f = &m.file;
    let c = &m.config;
    let mut types: BTreeMap<String, TypeRow> = BTreeMap::new();
    for t in f.tensors() {
        let r = types.entry(t.ty.name().to_string()).or_default();
        r.tensors += 1;
        r.bytes += t.n_bytes();
        r.params += t.n_elems();
    }
    let bpw = |bytes: u64, params: u64| 8.0 * bytes as f64 / params.max(1) as f64;
    for r in types.values_mut() {
        r.bits_per_weight = bpw(r.bytes, r.params);
    }
    let params: u64 = types.values().map(|r| r.params).sum();
    let bytes: u64 = types.values().map(|r| r.bytes).sum();
    let tokenizer = text(f, "tokenizer.ggml.model").map(|model| Tokenizer {
        model,
        tokens: array_len(f, "tokenizer.ggml.tokens"),
        merges: array_len(f, "tokenizer.ggml.merges"),
        pre: text(f, "tokenizer.ggml.pre"),
    });
    let template = text(f, "tokenizer.chat_template").map(|t| t.len());
    let known: HashSet<String> = c
        .file_tensor_shapes()
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    let unused_tensors: Vec<String> = f
        .tensors()
        .iter()
        .filter(|t| !known.contains(&t.name))
        .map(|t| t.name.clone())
        .collect();

    let mut uses = vec![format!(
        "trunk: {} layers ({} linear, {} full attention), run by prefill and decode",
        c.n_layers,
        c.n_linear_layers(),
        c.n_full_layers()
    )];
    for b in &m.mtp {
        uses.push(format!(
            "MTP block blk.{}: {} tensors, {:.2} MB, parsed and validated, not used by plain decoding (kept for speculative decoding)",
            b.layer,
            b.tensors.len(),
            b.bytes() as f64 / 1e6
        ));
    }
    uses.push(match &tokenizer {
        Some(t) if t.model != "none" => format!(
            "tokenizer: {} ({} tokens{}), read by nothing yet: tally's commands take token ids",
            t.model,
            t.tokens.unwrap_or(0),
            t.pre
                .as_ref()
                .map(|p| format!(", pre-tokenizer {p}"))
                .unwrap_or_default()
        ),
        Some(_) => "tokenizer: none (a synthetic file; tally's commands take token ids)".into(),
        None => "tokenizer: absent (tally's commands take token ids)".into(),
    });
    uses.push(match template {
        Some(n) => format!("chat template: present ({n} bytes), not used"),
        None => "chat template: absent".into(),
    });
    if !unused_tensors.is_empty() {
        uses.push(format!(
            "{} tensors tally does not read (listed in JSON)",
            unused_tensors.len()
        ));
    }
    let num = |k: &str| f.get(k).and_then(MetaValue::as_u64);
    Report {
        path: m.path.display().to_string(),
        parts: f
            .part_paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        file_bytes: f.file_bytes(),
        architecture: text(f, "general.architecture").unwrap_or_default(),
        name: text(f, "general.name"),
        size_label: text(f, "general.size_label"),
        file_type: num("general.file_type"),
        quantization_version: num("general.quantization_version"),
        block_count: c.block_count(),
        trunk_layers: c.n_layers,
        full_attention_layers: c.layers.iter().filter(|k| **k == LayerKind::Full).count(),
        linear_attention_layers: c.n_linear_layers(),
        mtp_layers: c.n_mtp_layers,
        hidden: c.hidden,
        vocab: c.vocab,
        experts: c.n_experts,
        experts_used: c.n_experts_used,
        context_length: c.context_length,
        tensors: f.tensors().len(),
        params,
        bits_per_weight: bpw(bytes, params),
        types,
        tokenizer,
        chat_template_bytes: template,
        uses,
        unused_tensors,
    }
}

pub fn main(a: Args) -> Result<()> {
    let model = open_model(&a.model)?;
    let r = report(&model);
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
        Format::Text | Format::Md => print_text(&r, a.output == Format::Md),
    }
    Ok(())
}

fn print_text(r: &Report, md: bool) {
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    println!(
        "{}: {} {} (name {}, size label {}), {:.3} MB",
        r.path,
        r.architecture,
        r.file_type
            .map(|t| format!("file type {t}"))
            .unwrap_or_else(|| "no file type".into()),
        or(&r.name),
        or(&r.size_label),
        r.file_bytes as f64 / 1e6
    );
    if r.parts.len() > 1 {
        println!(
            "split model: {} parts, read together: {}",
            r.parts.len(),
            r.parts.join(", ")
        );
    }
    println!(
        "layers: block_count {} = {} trunk ({} linear, {} full attention) + {} MTP; hidden {}, vocab {}, experts {} top-{}, context {}",
        r.block_count,
        r.trunk_layers,
        r.linear_attention_layers,
        r.full_attention_layers,
        r.mtp_layers,
        r.hidden,
        r.vocab,
        r.experts,
        r.experts_used,
        r.context_length
    );
    if md {
        println!("\n| type | tensors | bytes | bits per weight |\n|---|---:|---:|---:|");
        for (ty, t) in &r.types {
            println!(
                "| {ty} | {} | {} | {:.2} |",
                t.tensors, t.bytes, t.bits_per_weight
            );
        }
        println!(
            "| all | {} | {} | {:.2} |\n",
            r.tensors,
            r.types.values().map(|t| t.bytes).sum::<u64>(),
            r.bits_per_weight
        );
    } else {
        println!(
            "{:<8} {:>8} {:>16} {:>16} {:>6}",
            "type", "tensors", "bytes", "params", "bpw"
        );
        for (ty, t) in &r.types {
            println!(
                "{ty:<8} {:>8} {:>16} {:>16} {:>6.2}",
                t.tensors, t.bytes, t.params, t.bits_per_weight
            );
        }
        println!(
            "{:<8} {:>8} {:>16} {:>16} {:>6.2}",
            "all",
            r.tensors,
            r.types.values().map(|t| t.bytes).sum::<u64>(),
            r.params,
            r.bits_per_weight
        );
    }
    for u in &r.uses {
        println!("{}{u}", if md { "- " } else { "" });
    }
}
