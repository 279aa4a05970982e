//! The loaded kernels as typed handles, resolved by name once when the backend opens: a launch
//! takes a field, not a string. Every field is launched somewhere (a field nothing reads is a
//! dead-code warning), and every kernel the engine's sources define that is not here stays
//! unloaded (`lab/` holds the variants the engine does not use).

use std::sync::Arc;

use cudarc::driver::sys::CUfunction;
use cudarc::driver::{CudaContext, CudaModule};
use tally_gguf::GgmlType;

use super::compile;
use super::launch::Kernel;
use crate::EngineError;

/// The weight types with GEMM kernels, in the order of [`Kernels::gemm`].
pub const GEMM_TYPES: [GgmlType; 16] = [
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_0,
    GgmlType::BF16,
    GgmlType::F16,
    GgmlType::F32,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
];

/// The projection kernels of one weight type (gemm.cu): tensor-core tiles of BM 128, 64, 32,
/// the GEMV (one warp per output column group), and the decode GEMV `mmv_<t>`.
#[derive(Clone, Copy)]
pub struct GemmSet {
    pub tiles: [Kernel; 3],
    pub gemv: Kernel,
    /// The GEMV with 4 rows per warp (the same sums as `gemv`).
    pub gemv4: Kernel,
    /// The persistent multi-row integer GEMV (`gemvr_<t>`: one x row, `gemvr4_<t>`: up to
    /// four; the same sums as `gemv4`).
    pub gemvr: [Kernel; 2],
    /// The bulk-fed persistent GEMV (gemm.cu `gemvt_body`; `gemvt_<t>`: one x row, 4 weight rows
    /// a warp, `gemvt2_<t>`: 2; `gemvt4_<t>`: up to 4 x rows, 2 weight rows a warp).
    pub gemvt: [Kernel; 3],
    /// Up to four GEMVs of one input in one launch (`MultiGemvArgs`; the same sums as `gemv`).
    pub gemv_multi: Kernel,
    /// `gemv` and `gemv_multi` (one x row a block, 2 rows a warp) on the integer body alone
    /// (`gemvi_<t>`, `gemvi_multi_<t>`: more blocks a multiprocessor; the same sums).
    pub gemvi: Kernel,
    pub gemvi_multi: Kernel,
    /// `gemv_multi`'s every-row form (a verification batch: `MultiGemvArgs::mr` > 1) alone,
    /// `gemvi_mr_<t>`: more blocks a multiprocessor; the same sums.
    pub gemvi_mr: Kernel,
    pub mmv: Kernel,
    /// Up to four `mmv_<t>` launches in one (`MultiGemvArgs`; the same sums as `mmv`).
    pub mmv_multi: Kernel,
    /// `mmv` and `mmv_multi` on the integer body (`mmvi_<t>`, `mmvi_multi_<t>`: gemv_<t>'s sums
    /// bit for bit at K <= 1,024, every use of mmv).
    pub mmvi: Kernel,
    pub mmvi_multi: Kernel,
    /// The swapped tile `gemm_<t>_s32` (weights on the MMA's A side, tiles of 32 x rows).
    pub swap: Kernel,
    /// The swapped tile on wgmma and its x-resident form for K <= 512 (x from `x_f16_perm`), in
    /// `WgTile::ALL`'s order: `gemm_<t>_w32`, `_w128`, `_x64`, `_x96`, `_x128`.
    pub wg: [Kernel; 6],
    /// The gated wgmma tiles (`gemm_<t>_g32`, `_g128`: a MoE gate, up and their SwiGlu in one
    /// launch; the same sums as `_w32` / `_w128`).
    pub wg_gated: [Kernel; 2],
    /// The warp-specialised gated w128 tile `gemm_<t>_gs128` (gemm_wg.cuh `gemm_ws_body`).
    pub gs128: Kernel,
    /// Its 256-row form `gemm_<t>_gs256` (code only for the types whose stages fit a block).
    pub gs256: Kernel,
    /// gs256 with two A stages, `gemm_<t>_gs256a` (`TALLY_WS256=a2`; code only where they fit).
    pub gs256a: Kernel,
    /// The warp-specialised x-resident tile `gemm_<t>_xs128` (gemm_wg.cuh `gemm_wsx_body`).
    pub xs128: Kernel,
}

/// Head dims of the attention kernels, in the order of their arrays.
pub const ATTN_HEAD_DIMS: [usize; 4] = [32, 64, 128, 256];

pub struct Kernels {
    pub norm_rows: Kernel,
    pub norm_rows_w: Kernel,
    pub add_rms_norm: Kernel,
    pub add_rms_norm_256: Kernel,
    /// The same with the f16 copy of the output (`yh`, `TALLY_NORM_CAST=on`).
    pub norm_rows_h: Kernel,
    pub norm_rows_w_h: Kernel,
    pub add_rms_norm_256_h: Kernel,
    pub rope_neox: Kernel,
    pub kv_store: Kernel,
    pub binary_map: Kernel,
    pub shared_gate: Kernel,
    pub delta_gates: Kernel,
    pub router_topk: Kernel,
    pub router_topk8: Kernel,
    pub router_fused: Kernel,
    /// `router_fused` over grid.y token rows (a verification batch; each row's bits the one-row
    /// launch's).
    pub router_fused_rows: Kernel,
    pub moe_route: Kernel,
    pub moe_route_count: Kernel,
    pub moe_combine: Kernel,
    pub conv_silu: Kernel,
    pub delta_rule_chunk_prep: Kernel,
    pub delta_rule_chunk_prep_pro: Kernel,
    pub delta_rule_chunk_scan: Kernel,
    pub delta_rule_chunk_scan2: Kernel,
    pub delta_rule_step: Kernel,
    /// `delta_rule_step` with its fused prologue over 2-16 tokens (one token: `delta_rule_step`).
    pub delta_rule_step_pro: Kernel,
    /// `flash_attn_d{D}` by [`ATTN_HEAD_DIMS`].
    pub flash_attn: [Kernel; 4],
    /// `flash_attn_h_w4_d{D}` (f16 K/V copies, 64-row tiles) by [`ATTN_HEAD_DIMS`].
    pub flash_attn_h: [Kernel; 4],
    /// `flash_attn_wg_d256` (wgmma, 128-row tiles; attention_wg.cuh).
    pub flash_attn_wg: Kernel,
    /// Writes the f16 copies `flash_attn_h` and `flash_attn_wg` read.
    pub attn_kv_to_f16: Kernel,
    /// `flash_decode_d{D}` by [`ATTN_HEAD_DIMS`].
    pub flash_decode: [Kernel; 4],
    pub flash_attn_combine: Kernel,
    /// By [`GEMM_TYPES`].
    pub gemm: [GemmSet; 16],
    pub gemm_f32_simt: Kernel,
    pub gemm_f32_simt_m32: Kernel,
    /// `gemm_f32_simt`'s and `_simt_m32`'s tiles with 3xTF32 tensor-core products
    /// (`TALLY_F32_GEMM=tf32`).
    pub gemm_f32_tf32: Kernel,
    pub gemm_f32_tf32_m32: Kernel,
    pub dequant_rows: Kernel,
    pub dequant_f16: Kernel,
    pub cast_f16_rows: Kernel,
    /// x as f16 in the wgmma tiles' K order (gemm_wg.cuh), before `GemmSet::wg128`.
    pub x_f16_perm: Kernel,
    pub sample_token: Kernel,
    pub argmax_token: Kernel,
    /// The modules the handles point into (kept alive with them).
    _modules: Vec<Arc<CudaModule>>,
}

/// Finds kernel `name` (second) in the compiled source named first.
pub type Resolve<'a> = dyn Fn(&'static str, &'static str) -> Result<CUfunction, EngineError> + 'a;

/// One compiled source, as [`Kernels::resolve`] asks for its kernels.
struct Module<'a> {
    name: &'static str,
    resolve: &'a Resolve<'a>,
    pdl: bool,
}

impl Module<'_> {
    fn get(&self, name: &'static str) -> Result<Kernel, EngineError> {
        Ok(Kernel {
            f: (self.resolve)(self.name, name)?,
            name,
            pdl: self.pdl,
        })
    }
}

/// The kernel name of a type's projections: `gemm_<t>` etc. use these suffixes.
fn type_suffix(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q4_K => "q4_k",
        GgmlType::Q5_K => "q5_k",
        GgmlType::Q6_K => "q6_k",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::BF16 => "bf16",
        GgmlType::F16 => "f16",
        GgmlType::F32 => "f32",
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q5_1 => "q5_1",
        GgmlType::IQ4_NL => "iq4_nl",
        GgmlType::IQ4_XS => "iq4_xs",
        GgmlType::MXFP4 => "mxfp4",
        GgmlType::Q2_K => "q2_k",
        GgmlType::Q3_K => "q3_k",
        _ => "",
    }
}

/// A kernel name built at open time, kept for the life of the process (error messages name it).
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl Kernels {
    /// Compiles (or loads from the cache) every source for `arch` and resolves every kernel;
    /// `pdl`: launch them with programmatic dependent launch (sm_90 and later); `defines`: the
    /// options' extra NVRTC defines.
    pub fn load(
        ctx: &Arc<CudaContext>,
        arch: &str,
        pdl: bool,
        defines: &[String],
    ) -> Result<Kernels, EngineError> {
        let mut modules = Vec::new();
        for src in compile::SOURCES {
            let cubin = compile::compile(src, arch, defines)?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                .map_err(|e| EngineError::Cuda(format!("loading module {}: {e}", src.name)))?;
            modules.push((src.name, module));
        }
        let resolve = |src: &'static str, name: &'static str| -> Result<CUfunction, EngineError> {
            let (_, m) = modules
                .iter()
                .find(|(n, _)| *n == src)
                .ok_or_else(|| EngineError::Internal(format!("no kernel source {src}")))?;
            let f = m
                .load_function(name)
                .map_err(|e| EngineError::Cuda(format!("kernel {name} in {src}.cu: {e}")))?;
            Ok(f.cu_function())
        };
        let mut k = Kernels::resolve(pdl, &resolve)?;
        k._modules = modules.into_iter().map(|(_, m)| m).collect();
        Ok(k)
    }

    /// Every kernel handle the backend uses, each found by `resolve` (source name, kernel name):
    /// the one list of the names, which a test checks against the compiled sources.
    pub fn resolve(pdl: bool, resolve: &Resolve<'_>) -> Result<Kernels, EngineError> {
        let m = |name: &'static str| -> Result<Module<'_>, EngineError> {
            Ok(Module { name, resolve, pdl })
        };
        let (attn, gemm) = (m("attention")?, m("gemm")?);
        let by_dim = |prefix: &str| -> Result<[Kernel; 4], EngineError> {
            let k = |d: usize| attn.get(leak(format!("{prefix}_d{d}")));
            Ok([k(32)?, k(64)?, k(128)?, k(256)?])
        };
        let mut sets = Vec::with_capacity(GEMM_TYPES.len());
        for ty in GEMM_TYPES {
            let t = type_suffix(ty);
            let k = |name: String| gemm.get(leak(name));
            sets.push(GemmSet {
                tiles: [
                    k(format!("gemm_{t}"))?,
                    k(format!("gemm_{t}_m64"))?,
                    k(format!("gemm_{t}_m32"))?,
                ],
                gemv: k(format!("gemv_{t}"))?,
                gemv4: k(format!("gemv4_{t}"))?,
                gemvr: [k(format!("gemvr_{t}"))?, k(format!("gemvr4_{t}"))?],
                gemvt: [
                    k(format!("gemvt_{t}"))?,
                    k(format!("gemvt2_{t}"))?,
                    k(format!("gemvt4_{t}"))?,
                ],
                gemv_multi: k(format!("gemv_multi_{t}"))?,
                gemvi: k(format!("gemvi_{t}"))?,
                gemvi_multi: k(format!("gemvi_multi_{t}"))?,
                gemvi_mr: k(format!("gemvi_mr_{t}"))?,
                mmv: k(format!("mmv_{t}"))?,
                mmv_multi: k(format!("mmv_multi_{t}"))?,
                mmvi: k(format!("mmvi_{t}"))?,
                mmvi_multi: k(format!("mmvi_multi_{t}"))?,
                swap: k(format!("gemm_{t}_s32"))?,
                wg: [
                    k(format!("gemm_{t}_w32"))?,
                    k(format!("gemm_{t}_w128"))?,
                    k(format!("gemm_{t}_x64"))?,
                    k(format!("gemm_{t}_x96"))?,
                    k(format!("gemm_{t}_x128"))?,
                    k(format!("gemm_{t}_x32"))?,
                ],
                wg_gated: [k(format!("gemm_{t}_g32"))?, k(format!("gemm_{t}_g128"))?],
                gs128: k(format!("gemm_{t}_gs128"))?,
                gs256: k(format!("gemm_{t}_gs256"))?,
                gs256a: k(format!("gemm_{t}_gs256a"))?,
                xs128: k(format!("gemm_{t}_xs128"))?,
            });
        }
        let gemm_sets: [GemmSet; 16] = sets
            .try_into()
            .map_err(|_| EngineError::Internal("GEMM kernel sets".into()))?;
        let (delta, moe, elem) = (m("delta")?, m("moe")?, m("elementwise")?);
        let k = Kernels {
            norm_rows: m("norm")?.get("norm_rows")?,
            norm_rows_w: m("norm")?.get("norm_rows_w")?,
            add_rms_norm: m("norm")?.get("add_rms_norm")?,
            add_rms_norm_256: m("norm")?.get("add_rms_norm_256")?,
            norm_rows_h: m("norm")?.get("norm_rows_h")?,
            norm_rows_w_h: m("norm")?.get("norm_rows_w_h")?,
            add_rms_norm_256_h: m("norm")?.get("add_rms_norm_256_h")?,
            rope_neox: m("rope")?.get("rope_neox")?,
            kv_store: m("kv_store")?.get("kv_store")?,
            binary_map: elem.get("binary_map")?,
            shared_gate: elem.get("shared_gate")?,
            delta_gates: elem.get("delta_gates")?,
            router_topk: m("router")?.get("router_topk")?,
            router_topk8: m("router")?.get("router_topk8")?,
            router_fused: m("router")?.get("router_fused")?,
            router_fused_rows: m("router")?.get("router_fused_rows")?,
            moe_route: moe.get("moe_route")?,
            moe_route_count: moe.get("moe_route_count")?,
            moe_combine: moe.get("moe_combine")?,
            conv_silu: m("conv")?.get("conv_silu")?,
            delta_rule_chunk_prep: delta.get("delta_rule_chunk_prep")?,
            delta_rule_chunk_prep_pro: delta.get("delta_rule_chunk_prep_pro")?,
            delta_rule_chunk_scan: delta.get("delta_rule_chunk_scan")?,
            delta_rule_chunk_scan2: delta.get("delta_rule_chunk_scan2")?,
            delta_rule_step: delta.get("delta_rule_step")?,
            delta_rule_step_pro: delta.get("delta_rule_step_pro")?,
            flash_attn: by_dim("flash_attn")?,
            flash_attn_h: by_dim("flash_attn_h_w4")?,
            flash_attn_wg: attn.get("flash_attn_wg_d256")?,
            attn_kv_to_f16: attn.get("attn_kv_to_f16")?,
            flash_decode: by_dim("flash_decode")?,
            flash_attn_combine: attn.get("flash_attn_combine")?,
            gemm: gemm_sets,
            gemm_f32_simt: gemm.get("gemm_f32_simt")?,
            gemm_f32_simt_m32: gemm.get("gemm_f32_simt_m32")?,
            gemm_f32_tf32: gemm.get("gemm_f32_tf32")?,
            gemm_f32_tf32_m32: gemm.get("gemm_f32_tf32_m32")?,
            dequant_rows: gemm.get("dequant_rows")?,
            dequant_f16: gemm.get("dequant_f16")?,
            cast_f16_rows: gemm.get("cast_f16_rows")?,
            x_f16_perm: gemm.get("x_f16_perm")?,
            sample_token: m("sample")?.get("sample_token")?,
            argmax_token: m("sample")?.get("argmax_token")?,
            _modules: Vec::new(),
        };
        Ok(k)
    }

    /// The projection kernels of a weight type, if it has them.
    pub fn gemm_set(&self, ty: GgmlType) -> Option<&GemmSet> {
        GEMM_TYPES
            .iter()
            .position(|&t| t == ty)
            .map(|i| &self.gemm[i])
    }

    /// The attention kernel of head dim `d` from one of the per-dim arrays.
    pub fn by_head_dim(kernels: &[Kernel; 4], d: usize) -> Option<Kernel> {
        ATTN_HEAD_DIMS
            .iter()
            .position(|&x| x == d)
            .map(|i| kernels[i])
    }
}
