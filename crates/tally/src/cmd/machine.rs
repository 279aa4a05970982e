//! `tally machine`: this machine's facts and measured peaks (what every ledger is judged against).

use anyhow::Result;

use super::Format;
use super::common::machine;

/// Print the machine's facts and its measured ceilings: memory bandwidth and matrix rate.
///
/// Bandwidth: a large copy, read + write counted. Matrix rate: on a GPU an f16 GEMM through
/// cuBLAS; on the CPU a blocked f32 GEMM on every thread at once (printed in GFLOP/s there).
///
/// Example: tally machine --backend cpu -o md
#[derive(clap::Args)]
pub struct Args {
    /// Which ceilings: cpu or cuda.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Report format: text, json or md.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Format,
}

pub fn main(a: Args) -> Result<()> {
    let m = machine(&a.backend);
    match a.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&m)?),
        Format::Text | Format::Md => {
            let mut facts: Vec<(&str, String)> = vec![
                ("host", format!("{} ({})", m.hostname, m.os)),
                (
                    "cpu",
                    format!("{} ({} threads)", m.cpu_model, m.cpu_threads),
                ),
            ];
            if let Some(g) = &m.gpu {
                facts.push((
                    "gpu",
                    format!(
                        "{} (cc {}, {} SMs, {:.0} MiB L2, {:.1} GiB, driver {})",
                        g.name,
                        g.compute_capability,
                        g.sm_count,
                        g.l2_bytes as f64 / (1u64 << 20) as f64,
                        g.memory_bytes as f64 / (1u64 << 30) as f64,
                        g.driver
                    ),
                ));
            }
            let gbps = m.peak_gbps.map_or("n/a".into(), |x| format!("{x:.1} GB/s"));
            facts.push(("peak", format!("{gbps}, {}", flops_label(m.peak_tflops))));
            facts.push(("method", m.peak_method.clone().unwrap_or_default()));
            if a.output == Format::Md {
                println!("| fact | value |\n|---|---|");
                for (k, v) in facts {
                    println!("| {k} | {} |", v.replace('|', "\\|"));
                }
            } else {
                for (k, v) in facts {
                    println!("{k:<9} {v}");
                }
            }
        }
    }
    Ok(())
}

/// A matrix rate in TFLOP/s, or in GFLOP/s where TFLOP/s would round to zero (CPUs).
pub fn flops_label(tflops: Option<f64>) -> String {
    match tflops {
        None => "n/a FLOP/s".into(),
        Some(t) if t < 1.0 => format!("{:.1} GFLOP/s", t * 1e3),
        Some(t) => format!("{t:.1} TFLOP/s"),
    }
}
