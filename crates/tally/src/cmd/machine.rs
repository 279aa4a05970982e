//! `tally machine`: this machine's facts and measured peaks (what every ledger is judged against).

use anyhow::Result;

use super::Format;
use super::common::machine;

/// Print the machine's facts and its measured ceilings: memory bandwidth (a large copy, read +
/// write counted) and matrix rate (on a GPU: an f16 GEMM through cuBLAS).
#[derive(clap::Args)]
pub struct Args {
    /// Which ceilings: cpu or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

pub fn main(a: Args) -> Result<()> {
    let m = machine(&a.backend);
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&m)?),
        Format::Text | Format::Md => {
            println!("host      {} ({})", m.hostname, m.os);
            println!("cpu       {} ({} threads)", m.cpu_model, m.cpu_threads);
            if let Some(g) = &m.gpu {
                println!(
                    "gpu       {} (cc {}, {} SMs, {:.0} MiB L2, {:.1} GiB, driver {})",
                    g.name,
                    g.compute_capability,
                    g.sm_count,
                    g.l2_bytes as f64 / (1u64 << 20) as f64,
                    g.memory_bytes as f64 / (1u64 << 30) as f64,
                    g.driver
                );
            }
            let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "n/a".into());
            println!(
                "peak      {} GB/s, {} TFLOP/s",
                f(m.peak_gbps),
                f(m.peak_tflops)
            );
            println!("method    {}", m.peak_method.unwrap_or_default());
        }
    }
    Ok(())
}
