//! K-quants: super-blocks of 256 elements.
//!
//! - Q4_K (144 bytes): f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit scales and mins for eight
//!   32-element sub-blocks, 128 bytes of 4-bit quants; x = d*sc*q - dmin*m.
//! - Q5_K (176 bytes): as Q4_K plus 32 bytes holding the fifth bit of every quant.
//! - Q6_K (210 bytes): 128 bytes of low 4 bits, 64 bytes of high 2 bits, sixteen i8 scales for
//!   16-element sub-blocks, f16 `d` last; x = d*sc*(q-32).
//!
//! The quantisers follow ggml's reference (`quantize_row_q{4,5,6}_K_ref`) operation for
//! operation in f32, because the search for scales compares float errors and a single rounding
//! difference can pick another scale. In particular: no fused multiply-add anywhere (ggml's
//! reference build on x86-64 has no FMA to contract into, and Rust never contracts), sums are
//! accumulated left to right in the C order, and integer-to-float rounding goes through the same
//! magic-number trick as ggml's `nearest_int`.
//!
//! Where "the reference" is defined: ggml's C built without contraction (`-ffp-contract=off`,
//! or the x86-64 baseline ISA, which has no FMA). A ggml built with `-march=native` under gcc's
//! default `-ffp-contract=fast` may fuse `a*b + c` in these loops and then differ from both this
//! code and the gguf Python package in rare last-bit cases that flip a scale choice; such a
//! build is not a reference. Checked: the committed vectors, plus 35,000 one-off random blocks
//! with magnitudes from 1e-40 to 1e9 (`make_vectors.py --stress-blocks`), all byte-equal.
//! Degenerate inputs (magnitudes of ~1e7 and up, which overflow the f16 scale) match too, but
//! their dequantised NaNs carry the CPU's default NaN payload, which differs between x86 and Arm.

use super::float::{f16_to_f32, f32_to_f16};

const QK_K: usize = 256;
const Q4K_BYTES: usize = 144;
const Q5K_BYTES: usize = 176;
const Q6K_BYTES: usize = 210;
/// Below this, a group's largest magnitude counts as zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

#[inline]
fn half_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves the rounded integer
/// in the low mantissa bits. Outside that range (and for NaN) the result is garbage, but the
/// same garbage as ggml's, which matters for matching bytes on degenerate input.
#[inline]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes: sub-blocks 0..3 keep 6 bits
/// in bytes j and j+4; sub-blocks 4..7 keep their low 4 bits in byte j+4 and their top 2 bits in
/// the spare top bits of bytes j-4 (scale) and j (min).
#[inline]
fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = half_at(b, 0);
        let dmin = half_at(b, 2);
        let scales = &b[4..16];
        let qs = &b[16..144];
        for c in 0..4 {
            let (sc1, m1) = scale_min(2 * c, scales);
            let (sc2, m2) = scale_min(2 * c + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
            let q = &qs[32 * c..32 * c + 32];
            let (lo, hi) = y[64 * c..64 * c + 64].split_at_mut(32);
            for l in 0..32 {
                lo[l] = d1 * f32::from(q[l] & 0x0f) - m1;
                hi[l] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = half_at(b, 0);
        let dmin = half_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..176];
        for c in 0..4 {
            let (sc1, m1) = scale_min(2 * c, scales);
            let (sc2, m2) = scale_min(2 * c + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let q = &qs[32 * c..32 * c + 32];
            let (lo, hi) = y[64 * c..64 * c + 64].split_at_mut(32);
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                lo[l] = d1 * f32::from((q[l] & 0x0f) + h1) - m1;
                hi[l] = d2 * f32::from((q[l] >> 4) + h2) - m2;
            }
        }
    }
}

pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q6K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = half_at(b, 208);
        for h in 0..2 {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..128 + 32 * h + 32];
            let sc = &b[192 + 8 * h..192 + 8 * h + 8];
            let y = &mut y[128 * h..128 * h + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                let s = |k: usize| d * f32::from(sc[is + k] as i8);
                y[l] = s(0) * f32::from(q1);
                y[l + 32] = s(2) * f32::from(q2);
                y[l + 64] = s(4) * f32::from(q3);
                y[l + 96] = s(6) * f32::from(q4);
            }
        }
    }
}

/// Search parameters of the Q4_K/Q5_K sub-block fit.
struct Fit {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
}

/// Fits `x ≈ scale * L - min` with `L` in `0..=nmax` by weighted least squares over a sweep of
/// trial inverse scales, keeping the best (ggml's `make_qkx2_quants` with squared error).
/// Writes `L` and returns `(scale, min)` where `min >= 0` is subtracted on decode.
///
/// This one-sub-block form is the readable transcription; [`fit_scale_min_8`] is what runs,
/// and a unit test holds the two equal bit for bit.
#[cfg(test)]
fn fit_scale_min(x: &[f32], w: &[f32], p: &Fit, l_out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let nmax_f = p.nmax as f32;
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            laux[i] = l as u8;
            let lf = l as f32;
            sum_l += w[i] * lf;
            sum_l2 += w[i] * lf * lf;
            sum_xl += w[i] * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Eight f32 lanes: lane `j` belongs to sub-block `j`.
type Lanes = [f32; 8];

/// [`fit_scale_min`] for all eight 32-element sub-blocks at once, lane `j` = sub-block `j`.
/// Every lane performs exactly the scalar operations in the scalar order (so results are
/// bit-identical); interleaving eight independent dependency chains is what makes it fast,
/// since the sequential float sums cannot be reordered. `xt[i][j]` is element `i` of sub-block
/// `j`; writes `l[i][j]`; returns per-lane `(scale, min)`.
fn fit_scale_min_8(
    xt: &[Lanes; 32],
    wt: &[Lanes; 32],
    p: &Fit,
    l: &mut [[u8; 8]; 32],
) -> (Lanes, Lanes) {
    let mut min = xt[0];
    let mut max = xt[0];
    let mut sum_w = wt[0];
    let mut sum_x = [0f32; 8];
    for j in 0..8 {
        sum_x[j] = sum_w[j] * xt[0][j];
    }
    for i in 1..32 {
        for j in 0..8 {
            let v = xt[i][j];
            if v < min[j] {
                min[j] = v;
            }
            if v > max[j] {
                max[j] = v;
            }
            sum_w[j] += wt[i][j];
            sum_x[j] += wt[i][j] * v;
        }
    }
    let mut iscale = [0f32; 8];
    let mut scale = [0f32; 8];
    let mut flat = [false; 8];
    let nmax_f = p.nmax as f32;
    for j in 0..8 {
        if min[j] > 0.0 {
            min[j] = 0.0;
        }
        // Flat lanes are where the scalar form returns early; they run along below (their
        // arithmetic has no effects) and get the early return's values at the end.
        flat[j] = max[j] == min[j];
        iscale[j] = nmax_f / (max[j] - min[j]);
        scale[j] = 1.0 / iscale[j];
    }
    let mut best_error = [0f32; 8];
    for i in 0..32 {
        for j in 0..8 {
            let q = nearest_int(iscale[j] * (xt[i][j] - min[j])).clamp(0, p.nmax);
            l[i][j] = q as u8;
            let diff = scale[j] * q as f32 + min[j] - xt[i][j];
            best_error[j] += wt[i][j] * (diff * diff);
        }
    }
    let mut laux = [[0u8; 8]; 32];
    for is in 0..=p.nstep {
        let step = p.rmin + p.rdelta * is as f32 + nmax_f;
        for j in 0..8 {
            // `min` is the best fit's so far: ggml's loop updates it as it goes, so later
            // steps grid from the improved min (part of the reference behaviour).
            iscale[j] = step / (max[j] - min[j]);
        }
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; 8], [0f32; 8], [0f32; 8]);
        for i in 0..32 {
            for j in 0..8 {
                let q = nearest_int(iscale[j] * (xt[i][j] - min[j])).clamp(0, p.nmax);
                laux[i][j] = q as u8;
                let lf = q as f32;
                let w = wt[i][j];
                sum_l[j] += w * lf;
                sum_l2[j] += w * lf * lf;
                sum_xl[j] += w * lf * xt[i][j];
            }
        }
        let (mut this_scale, mut this_min, mut det) = ([0f32; 8], [0f32; 8], [0f32; 8]);
        for j in 0..8 {
            det[j] = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
            this_scale[j] = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / det[j];
            this_min[j] = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / det[j];
            if this_min[j] > 0.0 {
                this_min[j] = 0.0;
                this_scale[j] = sum_xl[j] / sum_l2[j];
            }
        }
        let mut cur_error = [0f32; 8];
        for i in 0..32 {
            for j in 0..8 {
                let diff = this_scale[j] * f32::from(laux[i][j]) + this_min[j] - xt[i][j];
                cur_error[j] += wt[i][j] * (diff * diff);
            }
        }
        for j in 0..8 {
            if !flat[j] && det[j] > 0.0 && cur_error[j] < best_error[j] {
                for i in 0..32 {
                    l[i][j] = laux[i][j];
                }
                best_error[j] = cur_error[j];
                scale[j] = this_scale[j];
                min[j] = this_min[j];
            }
        }
    }
    let mut neg_min = [0f32; 8];
    for j in 0..8 {
        if flat[j] {
            for row in l.iter_mut() {
                row[j] = 0;
            }
            scale[j] = 0.0;
        }
        neg_min[j] = -min[j];
    }
    (scale, neg_min)
}

/// The part Q4_K and Q5_K share: per-sub-block fits, 6-bit packed scales/mins, f16 `d`/`dmin`
/// written to `head[0..16]`, and final quants `L` (0..=nmax) recomputed against the rounded
/// scales.
fn quantize_scales_mins(x: &[f32], p: &Fit, head: &mut [u8], l: &mut [u8; QK_K]) {
    let mut xt = [[0f32; 8]; 32];
    let mut wt = [[0f32; 8]; 32];
    let mut sum_x2 = [0f32; 8];
    for i in 0..32 {
        for j in 0..8 {
            let v = x[32 * j + i];
            xt[i][j] = v;
            sum_x2[j] += v * v;
        }
    }
    for j in 0..8 {
        let av_x = (sum_x2[j] / 32.0).sqrt();
        for i in 0..32 {
            wt[i][j] = av_x + xt[i][j].abs();
        }
    }
    let mut lt = [[0u8; 8]; 32];
    let (scales, mins) = fit_scale_min_8(&xt, &wt, p, &mut lt);
    for i in 0..32 {
        for j in 0..8 {
            l[32 * j + i] = lt[i][j];
        }
    }
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let packed = &mut head[4..16];
    for j in 0..8 {
        // ggml stores nearest_int's int into a uint8_t before clamping to 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    head[0..2].copy_from_slice(&f32_to_f16(max_scale / 63.0).to_le_bytes());
    head[2..4].copy_from_slice(&f32_to_f16(max_min / 63.0).to_le_bytes());
    let d_all = half_at(head, 0);
    let dmin_all = half_at(head, 2);
    for j in 0..8 {
        let (sc, m) = scale_min(j, &head[4..16]);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            // Keeps the fit's quants for this sub-block, as ggml does.
            continue;
        }
        let dm = dmin_all * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, p.nmax) as u8;
        }
    }
}

pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    let p = Fit {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
    };
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q4K_BYTES)) {
        let (head, qs) = b.split_at_mut(16);
        quantize_scales_mins(x, &p, head, &mut l);
        for c in 0..4 {
            for i in 0..32 {
                qs[32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
    }
}

pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    let p = Fit {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
    };
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q5K_BYTES)) {
        let (head, rest) = b.split_at_mut(16);
        quantize_scales_mins(x, &p, head, &mut l);
        let (qh, qs) = rest.split_at_mut(32);
        qh.fill(0);
        for c in 0..4 {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for i in 0..32 {
                let mut l1 = l[64 * c + i];
                let mut l2 = l[64 * c + 32 + i];
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                qs[32 * c + i] = l1 | (l2 << 4);
            }
        }
    }
}

/// Fits `x ≈ scale * (L - 32)` for one 16-element group, weights x², searching 19 trial inverse
/// scales around -32/max (ggml's `make_qx_quants` with `rmse_type` 1). Writes `L` in 0..64.
fn fit_scale_q6(x: &[f32], l_out: &mut [u8]) -> f32 {
    const NMAX: i32 = 32;
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-NMAX, NMAX - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let assign = |iscale: f32, l_out: &mut [u8]| {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nearest_int(iscale * v).clamp(-NMAX, NMAX - 1) + NMAX) as u8;
        }
    };
    let iscale = -(NMAX as f32) / max;
    assign(iscale, l_out);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(NMAX as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            assign(iscale, l_out);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 16];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q6K_BYTES)) {
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let s = fit_scale_q6(&x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            b.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        b[208..210].copy_from_slice(&f32_to_f16(1.0 / iscale).to_le_bytes());
        for ib in 0..16 {
            // ggml clamps above at 127 and stores the int into an int8_t (wrapping).
            b[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d_all = half_at(b, 208);
        for j in 0..16 {
            let d = d_all * f32::from(b[192 + j] as i8);
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as u8;
            }
        }
        let (ql, rest) = b.split_at_mut(128);
        let qh = &mut rest[..64];
        for h in 0..2 {
            let lh = &l[128 * h..128 * h + 128];
            for i in 0..32 {
                let (q1, q2, q3, q4) = (lh[i], lh[i + 32], lh[i + 64], lh[i + 96]);
                ql[64 * h + i] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
                ql[64 * h + i + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
                qh[32 * h + i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interleaved fit equals the one-sub-block transcription bit for bit, on random data
    /// including flat, positive-only and zero sub-blocks.
    #[test]
    fn interleaved_fit_equals_scalar_fit() {
        let mut seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        eprintln!("seed {seed}");
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for (p, name) in [
            (
                Fit {
                    nmax: 15,
                    rmin: -1.0,
                    rdelta: 0.1,
                    nstep: 20,
                },
                "q4_K",
            ),
            (
                Fit {
                    nmax: 31,
                    rmin: -0.5,
                    rdelta: 0.1,
                    nstep: 15,
                },
                "q5_K",
            ),
        ] {
            for trial in 0..200 {
                let mut xt = [[0f32; 8]; 32];
                let mut wt = [[0f32; 8]; 32];
                for j in 0..8 {
                    let kind = (trial + j) % 4;
                    for i in 0..32 {
                        xt[i][j] = match kind {
                            0 => next() * 3.0,
                            1 => next() + 0.6,
                            2 => 0.25 * (j as f32 - 4.0),
                            _ => 0.0,
                        };
                        wt[i][j] = next() + 1.0;
                    }
                }
                let mut l8 = [[0u8; 8]; 32];
                let (s8, m8) = fit_scale_min_8(&xt, &wt, &p, &mut l8);
                for j in 0..8 {
                    let x: Vec<f32> = (0..32).map(|i| xt[i][j]).collect();
                    let w: Vec<f32> = (0..32).map(|i| wt[i][j]).collect();
                    let mut l = [0u8; 32];
                    let (s, m) = fit_scale_min(&x, &w, &p, &mut l);
                    assert_eq!(
                        (s.to_bits(), m.to_bits()),
                        (s8[j].to_bits(), m8[j].to_bits()),
                        "{name}"
                    );
                    assert!((0..32).all(|i| l[i] == l8[i][j]), "{name} lane {j}");
                }
            }
        }
    }
}
