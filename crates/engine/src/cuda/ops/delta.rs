//! The gated delta rule (`Op::DeltaRule`; reference `cpu/ops/delta.rs`) in `kernels/delta.cu`:
//! `delta_rule_chunk_prep` + `delta_rule_chunk_scan` over chunks of DELTA_C tokens, or
//! `delta_rule_step` token by token for short runs (decode).

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::DeltaArgs;
use crate::cuda::consts::{DELTA_C, DELTA_DV_MAX, DELTA_NS};
use crate::cuda::launch::launch;

/// At most this many tokens go token by token through `delta_rule_step`; longer runs are chunked.
pub(crate) const STEP_MAX_T: usize = 16;

/// The heads of one delta-rule node.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

/// Floats of the chunked path's workspace (`delta_work_floats` in delta.cu): per chunk and value
/// head W, P (hi, lo), U, G; per chunk and key head K, Q.
pub fn work_floats(t: i64, hk: i64, hv: i64, dk: i64, dv: i64) -> i64 {
    let nc = (t + DELTA_C - 1) / DELTA_C;
    nc * (hv * (32 * dk + 4096 + 64 * dv + 64) + hk * 64 * dk)
}

/// Workspace bytes a run of `t` tokens needs (0 for the token-by-token path).
pub fn work_bytes(t: usize, h: &Heads) -> usize {
    if t > STEP_MAX_T {
        4 * work_floats(
            t as i64,
            h.k_heads as i64,
            h.v_heads as i64,
            h.k_dim as i64,
            h.v_dim as i64,
        ) as usize
    } else {
        0
    }
}

/// Dynamic shared memory of `delta_rule_chunk_prep` (`delta_prep_smem_bytes` in delta.cu).
pub fn prep_smem_bytes(dk: i64) -> u32 {
    let ldk = dk + 8;
    let ldv = DELTA_DV_MAX + 8;
    let tile = 64 * ldk * 2;
    let mut o = 0;
    o += 64 * ldv * 2; // vh
    o += 64 * ldv * 2; // vl
    o += tile; // bk
    o += 64 * 72 * 2; // tm
    o += 3 * 256 * 4; // z
    o = o.max(4 * tile);
    o += 64 * 72 * 4; // am
    o += 64 * 72 * 4; // tf
    o += 64 * 4 + 64 * 4 + 32 * 4 + 64 * 4; // gs, bs, red, kn
    o as u32
}

/// Dynamic shared memory of `delta_rule_chunk_scan` (`stages` = 1) and
/// `delta_rule_chunk_scan2` (2) (`delta_scan_smem_bytes` in delta.cu): the copied operands
/// (the wgmma blocks W, Q [64][dk], K^T [dk][64], P hi + lo [64][64]; U, this block's f32
/// 64 x 32 slice; G), once or twice (each set then rounded up to 1024 bytes), S^T hi + lo
/// [32][dk], vnew and its decayed copy hi + lo [32][64] (f16), 16 reduction slots, two
/// mbarriers a set, and 1024 bytes of slack for the blocks' alignment.
pub fn scan_smem_bytes(dk: i64, stages: i64) -> u32 {
    let copied = 2 * 64 * dk * 2 // wt, qt
        + dk * 64 * 2 // kt
        + 2 * 64 * 64 * 2 // ph, pl
        + 64 * 32 * 4 // ub
        + 64 * 4; // gb
    let sets = if stages == 2 {
        2 * ((copied + 1023) / 1024 * 1024)
    } else {
        copied
    };
    let o = sets
        + 2 * 32 * dk * 2 // sh, sl
        + 4 * 32 * 64 * 2 // vh, vl, xh, xl
        + 16 * 4 // red
        + stages * 2 * 8 // two mbarriers a set
        + 1024;
    o as u32
}

/// The host's sizes asserted equal to delta.cu's own (appended to it at build time).
pub fn geometry_asserts() -> String {
    let mut s = String::new();
    for dk in [64i64, 128] {
        s += &format!(
            "static_assert(delta_prep_smem_bytes({dk}) == {}, \"delta prep smem differs from delta.rs\");\n",
            prep_smem_bytes(dk)
        );
        for stages in [1, 2] {
            s += &format!(
                "static_assert(delta_scan_smem_bytes({dk}, {stages}) == {}, \"delta scan smem differs from delta.rs\");\n",
                scan_smem_bytes(dk, stages)
            );
        }
    }
    for (t, hk, hv, dk, dv) in [
        (512, 16, 32, 128, 128),
        (8192, 16, 32, 128, 128),
        (65, 2, 4, 64, 32),
    ] {
        s += &format!(
            "static_assert(delta_work_floats({t}, {hk}, {hv}, {dk}, {dv}) == {}ll, \"delta workspace differs from delta.rs\");\n",
            work_floats(t, hk, hv, dk, dv)
        );
    }
    s
}

/// The fused prologue (`ops/fused.rs`) of a token-by-token run (a step, a verification batch),
/// or of a chunked run with key dims of 128 (`TALLY_DELTA_PREP=prologue`): the delta gates' and
/// the q and k L2 norms' inputs and parameters, and the gates' outputs (delta.cu's DeltaArgs).
#[derive(Debug, Clone, Copy)]
pub struct Prologue {
    /// The k and q norms' input views (pointer, row stride).
    pub kx: (u64, i64),
    pub qx: (u64, i64),
    /// (eps, scale) of the k and q norms.
    pub k_norm: (f32, f32),
    pub q_norm: (f32, f32),
    /// The gates' beta logits and alpha views.
    pub gb: (u64, i64),
    pub ga: (u64, i64),
    /// The gates' weights (at least Hv values each).
    pub dt_bias: u64,
    pub ssm_a: u64,
    /// The gates' outputs (the step's beta and g views).
    pub beta_out: u64,
    pub g_out: u64,
}

pub fn delta_rule(b: &mut CudaBackend, node: &Node, io: &Io, h: Heads) -> Result<(), EngineError> {
    delta_rule_with(b, node, io, h, None)
}

/// Whether a delta rule of `t` tokens, `r` query rows and key dim `k_dim` can take the fused
/// prologue: a token-by-token run (`delta_rule_step`: a one-token step, a verification batch, a
/// prompt of a few tokens) or a chunked run at key dim 128
/// (`delta_rule_chunk_prep`, whose warps normalise rows of 128).
pub(crate) fn takes_prologue(t: usize, r: usize, k_dim: usize) -> bool {
    r <= t && (t <= STEP_MAX_T || k_dim == 128)
}

/// [`delta_rule`], with the fused prologue ([`takes_prologue`]).
pub fn delta_rule_with(
    b: &mut CudaBackend,
    node: &Node,
    io: &Io,
    h: Heads,
    prologue: Option<Prologue>,
) -> Result<(), EngineError> {
    let (t, r) = (node.inputs[1].rows, node.inputs[0].rows);
    if prologue.is_some() && !takes_prologue(t, r, h.k_dim) {
        return Err(EngineError::Internal(format!(
            "the delta rule's fused prologue is for token-by-token runs and chunked runs at key dim 128 (R <= T); got T = {t}, R = {r}, key dim {}",
            h.k_dim
        )));
    }
    let Heads {
        k_heads,
        v_heads,
        k_dim,
        v_dim,
    } = h;
    if !matches!(k_dim, 64 | 128) || v_dim % 32 != 0 || v_dim > DELTA_DV_MAX as usize {
        return Err(EngineError::Unsupported(format!(
            "the CUDA delta rule supports key dims 64 and 128 and value dims of 32..128 in steps of 32; got {k_dim} and {v_dim}"
        )));
    }
    let chunked = t > STEP_MAX_T;
    let work = if chunked {
        b.workspace(work_bytes(t, &h))?
    } else {
        0
    };
    let mut a = DeltaArgs {
        q: io.ins[0].0,
        ldq: io.ins[0].1,
        k: io.ins[1].0,
        ldk: io.ins[1].1,
        v: io.ins[2].0,
        ldv: io.ins[2].1,
        g: io.ins[3].0,
        ldg: io.ins[3].1,
        beta: io.ins[4].0,
        ldb: io.ins[4].1,
        state: io.outs[1].0,
        o: io.outs[0].0,
        ldo: io.outs[0].1,
        work,
        t: t as i32,
        r: r as i32,
        hk: k_heads as i32,
        hv: v_heads as i32,
        dk: k_dim as i32,
        dv: v_dim as i32,
        kx: 0,
        ldkx: 0,
        qx: 0,
        ldqx: 0,
        keps: 0.0,
        kscale: 0.0,
        qeps: 0.0,
        qscale: 0.0,
        gb: 0,
        ldgb: 0,
        ga: 0,
        ldga: 0,
        dt_bias: 0,
        ssm_a: 0,
        beta_out: 0,
        g_out: 0,
        snap: 0,
        snap_ld: 0,
    };
    if !chunked {
        (a.snap, a.snap_ld) = b.token_states_for(a.state, t);
    }
    if let Some(p) = prologue {
        (a.kx, a.ldkx) = p.kx;
        (a.qx, a.ldqx) = p.qx;
        (a.keps, a.kscale) = p.k_norm;
        (a.qeps, a.qscale) = p.q_norm;
        (a.gb, a.ldgb) = p.gb;
        (a.ga, a.ldga) = p.ga;
        a.dt_bias = p.dt_bias;
        a.ssm_a = p.ssm_a;
        a.beta_out = p.beta_out;
        a.g_out = p.g_out;
    }
    let s = b.cu_stream();
    let slices = (v_dim as i64 / DELTA_NS) as u32;
    if !chunked {
        // The prologue over more than one token has its own kernel, so the one-token step's
        // code is as it was.
        let step = if a.kx != 0 && t > 1 {
            b.kernels.delta_rule_step_pro
        } else {
            b.kernels.delta_rule_step
        };
        // SAFETY: DeltaArgs mirrors delta.cu's struct (layout asserted at kernel build). Grid
        // (Hv, dv / DELTA_NS) as the kernel was built for; q, k, v, g, beta, o are the node's
        // views (R or T rows) and state its Hv x dk*dv view (real, or the replay's staged copy)
        // in buffers `prepare` sized; the step path reads no workspace (work = 0). With the
        // prologue (R <= T, checked above; delta_rule_step_pro at T > 1): kx, gb, ga are T-row
        // views, qx an R-row one, dt_bias and ssm_a weights of at least Hv values, beta_out and
        // g_out the beta and g views (ops/fused.rs checks each). snap, when set, is T copies of
        // the whole state buffer at the view's offset (token_states_for: 2 <= T <= the copies
        // kept).
        return unsafe { launch(step, (v_heads as u32, slices, 1), (128, 1, 1), 0, s, &a) };
    }
    let nc = (t as u64).div_ceil(DELTA_C as u64) as u32;
    let dk = k_dim as i64;
    // The prologue's prep is its own kernel, so the plain one's code is unchanged by it.
    let prep = if a.kx != 0 {
        b.kernels.delta_rule_chunk_prep_pro
    } else {
        b.kernels.delta_rule_chunk_prep
    };
    // SAFETY: as for the step, with grid (ceil(T / DELTA_C), Hv); `work` holds work_floats(..)
    // floats (the workspace grown above, which prepare() sized for the plan's largest node) and
    // the dynamic shared memory is delta.cu's own size for dk (asserted at kernel build), at
    // most what `configure` raised the kernel's limit to (dk = 128). With the prologue (dk =
    // 128, checked above), gb and ga are T-row views, dt_bias and ssm_a weights of at least Hv
    // values, beta_out and g_out the beta and g views (ops/fused.rs checks each); kx and qx are
    // the k and q views themselves, read through k and q. Both prep kernels take the same
    // arguments, grid, block and shared memory (the limit raised for each).
    unsafe {
        launch(
            prep,
            (nc, v_heads as u32, 1),
            (256, 1, 1),
            prep_smem_bytes(dk),
            s,
            &a,
        )
    }?;
    let (scan, stages) = if b.options.delta_ring {
        (b.kernels.delta_rule_chunk_scan2, 2)
    } else {
        (b.kernels.delta_rule_chunk_scan, 1)
    };
    // SAFETY: as for the prep, grid (Hv, dv / DELTA_NS); it reads what the prep wrote to the
    // workspace, earlier on the same stream. Either scan kernel takes the same arguments; its
    // shared memory is delta.cu's size for dk and its stages (asserted at kernel build), within
    // the limit `configure` raised for that kernel.
    unsafe {
        launch(
            scan,
            (v_heads as u32, slices, 1),
            (256, 1, 1),
            scan_smem_bytes(dk, stages),
            s,
            &a,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prologue_takes_token_by_token_runs_and_chunked_ones_at_key_dim_128() {
        // Token by token (a step, a verification batch, a short prompt's last layer): any key dim.
        assert!(takes_prologue(1, 1, 64));
        assert!(takes_prologue(4, 4, 128));
        assert!(takes_prologue(5, 1, 64));
        assert!(takes_prologue(STEP_MAX_T, STEP_MAX_T, 64));
        // Chunked: key dim 128 only (the prep's warps normalise rows of 128).
        assert!(takes_prologue(STEP_MAX_T + 1, 1, 128));
        assert!(!takes_prologue(STEP_MAX_T + 1, STEP_MAX_T + 1, 64));
        // More query rows than tokens: never.
        assert!(!takes_prologue(4, 5, 128));
        assert!(!takes_prologue(40, 41, 128));
    }
}
