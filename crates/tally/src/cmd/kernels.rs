//! `tally kernels`: compile the CUDA kernels into the on-disk cache ahead of their first use.

use anyhow::Result;
use tally_engine::cuda::{CudaOptions, compile};

use super::{Format, InputError};

/// Compile every CUDA kernel into tally's kernel cache now, with NVRTC alone (no GPU needed
/// when --arch is given).
///
/// The CUDA backend compiles its kernels at first use and caches them on disk
/// ($TALLY_CACHE, else ~/.cache/tally/cuda); on a new machine that first run waits about a
/// minute. Run this once (or on a machine with the same NVRTC release, then copy the folder)
/// and the first run starts at once. The options in the environment that select kernel
/// variants at compile time (TALLY_PREFETCH, TALLY_GEMV_BLOCKS) are honoured, as the backend
/// would use them.
///
/// Example: tally kernels --arch sm_90a
#[derive(clap::Args)]
pub struct Args {
    /// Target architecture, e.g. sm_90a (H100/H200). Default: the first GPU's.
    #[arg(long)]
    arch: Option<String>,
    /// Report format: text, json or md.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

pub fn main(a: Args) -> Result<()> {
    let arch = match a.arch {
        Some(s) => {
            let ok = s
                .strip_prefix("sm_")
                .is_some_and(|d| d.len() >= 2 && d.chars().all(|c| c.is_ascii_alphanumeric()));
            if !ok {
                return Err(InputError(format!(
                    "--arch {s}: expected a real architecture such as sm_90a or sm_89"
                ))
                .into());
            }
            s
        }
        None => tally_engine::cuda::device_arch()?,
    };
    let opts = CudaOptions::from_env()?;
    let done = compile::precompile(&arch, &opts.defines())?;
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&done)?),
        Format::Text | Format::Md => {
            if a.output == Format::Md {
                println!("| source | cached before | bytes | compile s |\n|---|---|---:|---:|");
            }
            for c in &done {
                if a.output == Format::Md {
                    println!(
                        "| {} | {} | {} | {:.1} |",
                        c.source,
                        if c.was_cached { "yes" } else { "no" },
                        c.bytes,
                        c.compile_s
                    );
                } else {
                    println!(
                        "{:<12} {:>9} bytes  {}",
                        c.source,
                        c.bytes,
                        if c.was_cached {
                            "cached".to_string()
                        } else {
                            format!("compiled in {:.1} s", c.compile_s)
                        }
                    );
                }
            }
            if let Some(dir) = done.first().and_then(|c| c.path.parent()) {
                println!("{arch}: {} sources in {}", done.len(), dir.display());
            }
        }
    }
    Ok(())
}
