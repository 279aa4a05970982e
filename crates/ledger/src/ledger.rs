//! The ledger: two measurements (A = ours, B = peer; or one engine at two commits) compared
//! category by category with the same method on both sides, sorted by gap.
//!
//! Per row: both sides' time (in-graph replay when both sides' figures are trusted, else
//! standalone for both, and the row says which), gap, share, standalone beside in-graph, the
//! noise-gated verdict ("attack", "leave alone", "no verdict"), bytes and GB/s against the
//! measured peak, FLOPs and TFLOP/s against the peak, bits per weight, the roofline floor, the
//! byte check and the biggest-kernel check.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::measure::{Measurement, ProbeCheck};
use crate::noise::{Comparison, Figure, Verdict, compare};
use crate::opbench::{TopOp, tflops};
use crate::replay::UPPER_BOUND_NOTE;
use crate::schema::{EngineInfo, MachineInfo, SCHEMA_VERSION};

/// Settings of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerConfig {
    /// Use in-graph figures even when a replay validation failed (rows still say so).
    pub allow_untrusted_replay: bool,
    /// Biggest kernels within this relative difference of TFLOP/s are "even".
    pub kernel_even_ratio: f64,
    /// Byte counts within this relative difference are "the same bytes".
    pub byte_same_ratio: f64,
    /// Fewer samples than this on either side give "no verdict".
    pub min_samples: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            allow_untrusted_replay: false,
            kernel_even_ratio: 0.10,
            byte_same_ratio: 0.05,
            min_samples: 3,
        }
    }
}

/// Where one side's figure of a row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FigureSource {
    /// In-graph replay increment (trusted, or allowed by configuration).
    InGraph,
    /// Standalone category time.
    Standalone,
    /// The side's graph has no node of this category: 0 ms by construction.
    Absent,
    /// The side has nodes of this category but no usable figure.
    Missing,
}

/// Which method a row compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowMethod {
    /// In-graph on both sides.
    InGraph,
    /// Standalone on both sides.
    Standalone,
    /// Different methods on the two sides: the comparison is weak.
    Mixed,
}

/// The ledger's call on a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowVerdict {
    /// A is slower beyond the noise: a target.
    Attack,
    /// A is already faster or equal: nobody touches it this round.
    LeaveAlone,
    /// The noise gate cannot tell.
    NoVerdict,
}

impl RowVerdict {
    /// The word used in reports.
    pub fn word(self) -> &'static str {
        match self {
            RowVerdict::Attack => "attack",
            RowVerdict::LeaveAlone => "leave alone",
            RowVerdict::NoVerdict => "no verdict",
        }
    }
}

/// Roofline floor of a row's work on one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Roofline {
    /// `(bytes read + written) / peak_gbps`.
    pub bytes_floor_ms: Option<f64>,
    /// `flops / peak_tflops`.
    pub flops_floor_ms: Option<f64>,
    /// The larger of the two.
    pub floor_ms: Option<f64>,
}

/// The roofline floor: bytes at the measured bandwidth peak and FLOPs at the measured matrix
/// peak; None where a peak is unknown or not positive.
pub fn roofline(
    bytes: u64,
    flops: u64,
    peak_gbps: Option<f64>,
    peak_tflops: Option<f64>,
) -> Roofline {
    let bytes_floor_ms = peak_gbps
        .filter(|&p| p > 0.0)
        .map(|p| bytes as f64 / (p * 1e6));
    let flops_floor_ms = peak_tflops
        .filter(|&p| p > 0.0)
        .map(|p| flops as f64 / (p * 1e9));
    let floor_ms = match (bytes_floor_ms, flops_floor_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    Roofline {
        bytes_floor_ms,
        flops_floor_ms,
        floor_ms,
    }
}

/// GB/s of `bytes` moved in `ms`: `bytes / ms / 1e6`; None when either is 0.
pub fn gbps(bytes: u64, ms: f64) -> Option<f64> {
    (bytes > 0 && ms > 0.0).then(|| bytes as f64 / ms / 1e6)
}

/// Bits per weight: `8 * weight_bytes / weight_params`; None without weights.
pub fn bits_per_weight(weight_bytes: u64, weight_params: u64) -> Option<f64> {
    (weight_params > 0).then(|| 8.0 * weight_bytes as f64 / weight_params as f64)
}

/// One side of a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    /// The figure compared (per `source`).
    pub ms: f64,
    /// Its spread (IQR of the paired increments, or summed standalone IQRs).
    pub spread_ms: f64,
    /// Samples behind it.
    pub samples: usize,
    /// Where `ms` comes from.
    pub source: FigureSource,
    /// In-graph replay increment, when replayed.
    pub in_graph_ms: Option<f64>,
    /// The in-graph figure passed every check.
    pub in_graph_trusted: bool,
    /// Standalone category time (realistic routing).
    pub standalone_ms: Option<f64>,
    /// Standalone with first-k routing, when measured.
    pub standalone_first_k_ms: Option<f64>,
    /// `ms` over the side's sum of row figures.
    pub share_ratio: f64,
    /// Work nodes.
    pub nodes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `(read + written) / ms`.
    pub gbps: Option<f64>,
    /// `gbps / peak_gbps`.
    pub gbps_of_peak_ratio: Option<f64>,
    /// Weight bytes read.
    pub weight_bytes: u64,
    /// Weight elements.
    pub weight_params: u64,
    /// `8 * weight_bytes / weight_params`.
    pub bits_per_weight: Option<f64>,
    /// FLOPs.
    pub flops: u64,
    /// `flops / ms`.
    pub tflops: Option<f64>,
    /// `tflops / peak_tflops`.
    pub tflops_of_peak_ratio: Option<f64>,
    /// Roofline floor.
    pub roofline: Roofline,
    /// Most expensive op key (standalone).
    pub top_kernel: Option<TopOp>,
    /// Dead-work FLOPs in this category.
    pub wasted_flops: u64,
}

/// Outcome of the byte check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ByteVerdict {
    /// A reads fewer bytes and is slower.
    FewerBytesButSlower,
    /// A reads about the same bytes and is slower.
    SameBytesButSlower,
    /// A reads more bytes and is slower.
    MoreBytesAndSlower,
    /// A is not slower.
    NotSlower,
    /// A side reads no bytes.
    NoBytes,
}

impl ByteVerdict {
    /// What the verdict tells the reader to do.
    pub fn message(self) -> &'static str {
        match self {
            ByteVerdict::FewerBytesButSlower => {
                "fewer bytes but slower: not bandwidth-bound, look at compute/dequant"
            }
            ByteVerdict::SameBytesButSlower => {
                "same bytes but slower: compare GB/s with the peak, then compute/dequant"
            }
            ByteVerdict::MoreBytesAndSlower => {
                "more bytes and slower: cut bytes first (bits per weight, layout, dead work)"
            }
            ByteVerdict::NotSlower => "not slower",
            ByteVerdict::NoBytes => "no bytes on one side",
        }
    }
}

/// If the row were bandwidth-bound, time would scale with bytes read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ByteCheck {
    /// `a.bytes_read / b.bytes_read`.
    pub byte_ratio: Option<f64>,
    /// `b.ms * byte_ratio`: A's time if both were bandwidth-bound.
    pub bandwidth_bound_a_ms: Option<f64>,
    /// The outcome.
    pub verdict: ByteVerdict,
}

/// The byte check of a row.
pub fn byte_check(a: &Side, b: &Side, verdict: RowVerdict, same_ratio: f64) -> ByteCheck {
    let byte_ratio =
        (a.bytes_read > 0 && b.bytes_read > 0).then(|| a.bytes_read as f64 / b.bytes_read as f64);
    let v = match (verdict, byte_ratio) {
        (RowVerdict::Attack, None) => ByteVerdict::NoBytes,
        (RowVerdict::Attack, Some(r)) if r < 1.0 - same_ratio => ByteVerdict::FewerBytesButSlower,
        (RowVerdict::Attack, Some(r)) if r > 1.0 + same_ratio => ByteVerdict::MoreBytesAndSlower,
        (RowVerdict::Attack, Some(_)) => ByteVerdict::SameBytesButSlower,
        _ => ByteVerdict::NotSlower,
    };
    ByteCheck {
        byte_ratio,
        bandwidth_bound_a_ms: byte_ratio.map(|r| b.ms * r),
        verdict: v,
    }
}

/// Outcome of the biggest-kernel check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelVerdict {
    /// Within the tolerance of the peer's.
    Even,
    /// Slower than the peer's.
    Slower,
    /// Faster than the peer's.
    Faster,
    /// No TFLOP/s on a side.
    Unknown,
}

impl KernelVerdict {
    /// What the verdict tells the reader to do.
    pub fn message(self) -> &'static str {
        match self {
            KernelVerdict::Even => {
                "kernel even with peer: look outside it (layout copies, dead work, gaps)"
            }
            KernelVerdict::Slower => "biggest kernel slower than peer's: the kernel is a target",
            KernelVerdict::Faster => {
                "biggest kernel faster than peer's: any gap is outside it (layout copies, dead work, gaps)"
            }
            KernelVerdict::Unknown => "no kernel throughput to compare",
        }
    }
}

/// The biggest single kernel of the row on each side, in TFLOP/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelCheck {
    /// A's biggest kernel TFLOP/s.
    pub a_tflops: Option<f64>,
    /// B's biggest kernel TFLOP/s.
    pub b_tflops: Option<f64>,
    /// `a / b`.
    pub ratio: Option<f64>,
    /// The outcome.
    pub verdict: KernelVerdict,
}

/// The biggest-kernel check of a row.
pub fn kernel_check(a: &Side, b: &Side, even_ratio: f64) -> KernelCheck {
    let a_tflops = a.top_kernel.as_ref().and_then(|k| k.tflops);
    let b_tflops = b.top_kernel.as_ref().and_then(|k| k.tflops);
    let ratio = a_tflops.zip(b_tflops).map(|(x, y)| x / y);
    let verdict = match ratio {
        None => KernelVerdict::Unknown,
        Some(r) if (r - 1.0).abs() <= even_ratio => KernelVerdict::Even,
        Some(r) if r < 1.0 => KernelVerdict::Slower,
        Some(_) => KernelVerdict::Faster,
    };
    KernelCheck {
        a_tflops,
        b_tflops,
        ratio,
        verdict,
    }
}

/// One category of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerRow {
    /// The category.
    pub category: Category,
    /// Method of the comparison.
    pub method: RowMethod,
    /// Ours.
    pub a: Side,
    /// Peer.
    pub b: Side,
    /// `a.ms - b.ms` (positive: A slower).
    pub gap_ms: f64,
    /// The noise gate's comparison.
    pub comparison: Comparison,
    /// The call.
    pub verdict: RowVerdict,
    /// Byte check.
    pub byte_check: ByteCheck,
    /// Biggest-kernel check.
    pub kernel_check: KernelCheck,
}

/// Everything about one side that is not per category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideSummary {
    /// `engine@version (backend)`.
    pub label: String,
    /// Engine facts.
    pub engine: EngineInfo,
    /// Machine facts.
    pub machine: MachineInfo,
    /// End-to-end plain prefill median.
    pub e2e_prefill_ms: f64,
    /// Its IQR.
    pub e2e_prefill_spread_ms: f64,
    /// Prompt tokens per second.
    pub prefill_tok_s: Option<f64>,
    /// Decode tokens per second.
    pub decode_tok_s: Option<f64>,
    /// Sum of the side's row figures.
    pub category_sum_ms: f64,
    /// Standalone sum over e2e.
    pub standalone_coverage_ratio: Option<f64>,
    /// Same with first-k routing.
    pub standalone_first_k_coverage_ratio: Option<f64>,
    /// Sum of in-graph increments.
    pub in_graph_sum_ms: Option<f64>,
    /// The observe-all run's median wall time.
    pub observe_all_ms: Option<f64>,
    /// The observe-all run's time outside its nodes (graph building, scheduling, host work):
    /// in no category (None when the engine cannot tell).
    #[serde(default)]
    pub outside_nodes_ms: Option<f64>,
    /// In-graph sum over the observe-all run's time inside its nodes (its wall time when the
    /// engine cannot tell).
    pub in_graph_coverage_ratio: Option<f64>,
    /// Observe-all minus plain.
    pub observation_cost_ms: Option<f64>,
    /// Its ratio to plain.
    pub observation_cost_ratio: Option<f64>,
    /// Replay validations passed (None: no replay).
    pub replay_trusted: Option<bool>,
    /// Why not.
    pub replay_problems: Vec<String>,
    /// Graph checks passed.
    pub graph_ok: bool,
    /// Failed graph checks.
    pub graph_issues: Vec<String>,
    /// Probe completeness.
    pub probe: ProbeCheck,
    /// Dead nodes.
    pub dead_nodes: u64,
    /// Partially dead nodes.
    pub partial_nodes: u64,
    /// Up to eight names of dead or partially dead nodes.
    pub dead_work_examples: Vec<String>,
    /// Wasted FLOPs.
    pub wasted_flops: u64,
    /// Their share of all FLOPs.
    pub wasted_flops_ratio: f64,
    /// Wasted bytes.
    pub wasted_bytes: u64,
    /// Their share of all bytes.
    pub wasted_bytes_ratio: f64,
    /// Windows/attempts the noise gate discarded.
    pub gate_discards: usize,
    /// A retry budget ran out somewhere.
    pub gate_exhausted: bool,
    /// The lowest and highest machine level of the replay's kept windows
    /// (`gate::WindowRecord::level`: the host ran that window that much faster or slower;
    /// every statistic is corrected by it), when any differs from 1 by more than 2%.
    #[serde(default)]
    pub gate_level_range: Option<(f64, f64)>,
}

/// The totals row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    /// Sum of A's row figures.
    pub a_ms: f64,
    /// Sum of B's row figures.
    pub b_ms: f64,
    /// `a_ms - b_ms`.
    pub gap_ms: f64,
    /// End-to-end prefill, A vs B.
    pub e2e: Comparison,
}

/// The ledger document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ledger {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Tokens of the measured batch (A's; the prompt of a prefill).
    pub n_tokens: u64,
    /// Context tokens before the measured batch (A's; 0: a prefill from a fresh state, D: a
    /// decode step at depth D). Files written before the field read as 0.
    #[serde(default)]
    pub n_past: u64,
    /// Ours.
    pub a: SideSummary,
    /// Peer.
    pub b: SideSummary,
    /// Rows sorted by gap, largest first.
    pub rows: Vec<LedgerRow>,
    /// Totals.
    pub totals: Totals,
    /// Method notes every report prints (upper bounds, routing, methods).
    pub notes: Vec<String>,
    /// Problems that weaken the whole comparison (untrusted replay, different prompts or
    /// machines, incomplete probes, failed graph checks).
    pub warnings: Vec<String>,
    /// Settings used.
    pub config: LedgerConfig,
}

impl Ledger {
    /// Why the verdicts are withheld (failed validations, exhausted noise gates); empty when
    /// the ledger can be trusted. Non-empty means the headline says "no verdict".
    pub fn withheld(&self) -> Vec<String> {
        build::withheld_reasons(&self.a, &self.b)
    }

    /// The measured workload (A's).
    pub fn workload(&self) -> crate::subject::Workload {
        crate::subject::Workload {
            n_past: self.n_past as usize,
            n_tokens: self.n_tokens as usize,
        }
    }
}

impl fmt::Display for FigureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FigureSource::InGraph => "in-graph",
            FigureSource::Standalone => "standalone",
            FigureSource::Absent => "absent",
            FigureSource::Missing => "missing",
        })
    }
}

impl fmt::Display for RowMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowMethod::InGraph => "in-graph",
            RowMethod::Standalone => "standalone",
            RowMethod::Mixed => "mixed",
        })
    }
}

/// Builds the ledger with default settings.
pub fn build_ledger(a: &Measurement, b: &Measurement) -> Ledger {
    build_ledger_with(a, b, &LedgerConfig::default())
}

mod build;
pub use build::build_ledger_with;

#[cfg(test)]
mod tests;
