// The gated delta rule (Op::DeltaRule): per value head h, state S (dk x dv, f32, row-major [i][j]),
// for each token t:  S = S*exp(g[t,h]);  S += k_t (x) beta[t,h]*(v_t - S^T k_t);  o_t = S^T q_t.
// Value head h reads key head h % Hk. q holds the LAST R tokens only (outputs for those tokens).
//
// Two paths, one parameter struct (DeltaArgs):
//  * chunked prefill (chunks of 64 tokens):
//      1. delta_rule_chunk_prep  grid (nc, Hv), 256 threads, delta_prep_smem_bytes(dk) dynamic smem.
//         Fully parallel over (chunk, value head). Per chunk: G = cumsum(g); the strictly lower
//         A_ij = beta_i (k_i.k_j) exp(G_i-G_j); T = (I+A)^-1 (blocked forward substitution, f32);
//         W = T (beta exp(G) K), U = T (beta V), P_ij = (q_i.k_j) exp(G_i-G_j) (j <= i), written to
//         the workspace (W, q as f16, k as f16 transposed; P as hi + lo f16; U, G as f32), each
//         as the image of the scan's shared-memory tile (delta_common.cuh).
//         Every tile's global loads are issued before any of them is used (so many in flight).
//      2. delta_rule_chunk_scan  grid (Hv, dv/32), 256 threads, delta_scan_smem_bytes(dk) dynamic smem.
//         Sequential over chunks; a block owns (value head, 32 columns of S), S stays in registers
//         (f32). Per chunk: vnew = U - W S;  o = exp(G) (Q S) + P vnew;
//         S = exp(G_last) S + K^T (exp(G_last - G) vnew). Its products on wgmma, its operands
//         moved by bulk copies (cp.async.bulk + mbarrier; sm_90a).
//         delta_rule_chunk_scan2: the same with two sets of the copied operands, each chunk's
//         copies issued a whole chunk ahead (TALLY_DELTA_SCAN=ring; the same outputs bit for bit).
//         delta_rule_chunk_prep_pro: the same with the fused prologue (DeltaArgs::kx set, dk =
//         128): g and beta computed from the gates' inputs (and stored), q and k normalised as
//         they are loaded (delta_l2_scale128); the same outputs as the unfused launches, bit for bit.
//    Both launches on one stream, prep first. nc = ceil(T/64). T = 0: launch neither.
//  * token by token (decode, small T): delta_rule_step  grid (Hv, dv/32), 128 threads, no dynamic smem.
//
// Tensor cores: mma.sync m16n8k16 (prep) and wgmma m64n32k16 (scan), f16 x f16 -> f32. The
// operands that carry the recurrence (S, vnew) and beta*V are split into hi + lo f16 halves after a power-of-two rescale of the block's values
// (so they never overflow f16, and hi + lo keeps ~21 bits). The Gram products q.k and k.k use hi + lo
// halves of q and k (3 MMAs: hi*hi + hi*lo + lo*hi), because near-orthogonal unit vectors lose
// their relative precision in one f16 rounding (single-row errors up to 6e-2 in simulation), and
// P is stored as hi + lo. W, T, beta*exp(G)*K and the scan's copies of k and q are single f16
// (bounded by 1 in magnitude: q, k are unit rows, |W_i| <= |k_i|). Accumulation f32.
// Expected error vs a float64 sequential reference (simulated): o ~7e-5, state ~2e-4 relative
// (the state error is the f16 rounding of k in the state update).
//
// Host contract:
//   * dynamic smem: delta_prep_smem_bytes(dk) (107,392 B at dk 128; 2 blocks/SM) and
//     delta_scan_smem_bytes(dk) (107,856 B at dk 128; scan2: delta_scan_smem_bytes(dk, 2),
//     183,392 B); all three need cudaFuncAttributeMax-
//     DynamicSharedMemorySize raised (once per kernel, to the dk = 128 value covers both).
//   * workspace: delta_work_floats(T, Hk, Hv, dk, dv) =
//       ceil(T/64) * (Hv*(32*dk + 4096 + 64*dv + 64) + Hk*64*dk) floats, 16-byte aligned
//     (337 MB at T = 8192, 21 MB at T = 512 with the real heads), 16-byte aligned (the bulk
//     copies need it); only the chunked path uses it;
//     no zeroing needed.
//   * shapes (checked again on the device: unsupported ones write nothing): dk in {64, 128};
//     dv % 32 == 0 and 32 <= dv <= 128; Hv % Hk == 0; 0 <= R <= T.
//   * inputs: q, k rows L2-normalised (|x| <= 1); g <= 0 and finite; beta in [0, 1].
//   * state is read once at the start and written at the end by the block that owns those
//     columns, so passing the same buffer as input and output state is safe; o must not alias
//     the inputs. Any strides (ld*) and alignment of q, k, v, g, beta, o, state.
#include "delta_common.cuh"

// ---------------------------------------------------------------------------------------------
// delta_rule_chunk_prep: one block per (chunk, value head), 256 threads.

// The prologue's L2 norm scale of one row of 128 held by a warp as float4 lanes (lane l: elements
// 4l .. 4l + 3), with norm_rows' arithmetic at 128 threads (which norm_rows_w plays; the unfused
// q and k norms of a prompt run there: ops/fused.rs checks the block size): element 32w + i is
// thread 32w + i's, each 32-element segment w is summed by warp_sum's pairs (i ^ 16, ^ 8, ^ 4,
// ^ 2, ^ 1) and block_sum adds the four sums as (S0 + S2) + (S1 + S3). Here element 32w + i is
// lane 8w + i / 4, component i % 4: warp_sum's first three stages are lane xors 4, 2, 1 and its
// last two the components' pairs (c ^ 2, then c ^ 1); each addition has the same two operands
// (IEEE addition commutes), so x * scale is the norm's output bit for bit.
__device__ __forceinline__ float delta_l2_scale128(float4 x, float eps, float scale) {
    float v[4] = {x.x * x.x, x.y * x.y, x.z * x.z, x.w * x.w};
#pragma unroll
    for (int o = 4; o > 0; o >>= 1)
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] += __shfl_xor_sync(0xffffffffu, v[c], o);
    const float seg = (v[0] + v[2]) + (v[1] + v[3]);
    const float s0 = __shfl_sync(0xffffffffu, seg, 0), s1 = __shfl_sync(0xffffffffu, seg, 8);
    const float s2 = __shfl_sync(0xffffffffu, seg, 16), s3 = __shfl_sync(0xffffffffu, seg, 24);
    return rsqrtf(((s0 + s2) + (s1 + s3)) + eps) * scale;
}
__device__ __forceinline__ float4 delta_mul4(float4 x, float s) {
    return make_float4(x.x * s, x.y * s, x.z * s, x.w * s);
}

template <int DK, bool PRO>
__device__ __forceinline__ void delta_prep_body(const DeltaArgs& a, unsigned char* sm) {
    static_assert(!PRO || DK == 128, "the prologue's norms take rows of 128");
    constexpr int LDK = DK + 8, LDV = DELTA_DV_MAX + 8;
    const DeltaPrepSmem L = delta_prep_layout(DK);
    __half* Kh = (__half*)(sm + L.kh);
    __half* Kl = (__half*)(sm + L.kl);
    __half* Qh = (__half*)(sm + L.qh);
    __half* Ql = (__half*)(sm + L.ql);
    __half* Vh = (__half*)(sm + L.vh);  // Vh, Vl, Bk, Tm, Z reuse K, Q after the Gram products
    __half* Vl = (__half*)(sm + L.vl);
    __half* Bk = (__half*)(sm + L.bk);
    float* Am = (float*)(sm + L.am);
    float* Tf = (float*)(sm + L.tf);
    __half* Tm = (__half*)(sm + L.tm);
    float* Z = (float*)(sm + L.z);
    float* Gs = (float*)(sm + L.gs);
    float* Bs = (float*)(sm + L.bs);
    float* Kn = (float*)(sm + L.kn);
    float* red = (float*)(sm + L.red);

    const int c = blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int T = a.T, dv = a.dv;
    const int t0 = c * DELTA_C;
    const int kh = h % a.Hk;
    const int q0 = T - a.R;  // first token with a query row
    const bool has_out = a.R > 0 && t0 + DELTA_C > q0;
    const bool owner = h < a.Hk;  // h == kh: writes the f16 copies of k and q
    const DeltaWork wk = delta_work_split(a);
    const i64 ch = (i64)c * a.Hv + h;
    const i64 ck = (i64)c * a.Hk + kh;
    // PRO, the fused prologue (kx set; DK = 128, checked at the kernel's entry): q and k arrive
    // before their L2 norms and g, beta before the delta gates. Its own instantiation, so the
    // plain prep's code is the one before.

    // 1. g, beta -> G = inclusive cumsum (two warps), beta. With the prologue, g and beta are
    //    the delta gates' outputs, computed here with delta_gates' expressions and stored (each
    //    (token, value head) by the one block of its chunk and head).
    if (tid < 64) {
        const int t = t0 + tid;
        float gv = 0.0f, bv = 0.0f;
        if (t < T) {
            if constexpr (PRO) {
                const float bl = a.gb[(i64)t * a.ldgb + h], al = a.ga[(i64)t * a.ldga + h];
                bv = 1.0f / (1.0f + expf(-bl));
                gv = a.ssm_a[h] * gates_softplus(al + a.dt_bias[h]);
                a.beta_out[(i64)t * a.ldb + h] = bv;
                a.g_out[(i64)t * a.ldg + h] = gv;
            } else {
                gv = __ldg(a.g + (i64)t * a.ldg + h);
                bv = __ldg(a.beta + (i64)t * a.ldb + h);
            }
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float n = __shfl_up_sync(0xffffffffu, gv, o);
            if (lane >= o) gv += n;
        }
        Gs[tid] = gv;
        Bs[tid] = bv;
    }
    // 2. k, q -> hi, lo f16 tiles (the hi halves also go to the workspace, from the owner block).
    //    Every load of the tile is issued before the first store: a store to global memory may
    //    alias the inputs as far as the compiler knows, so a load-split-store loop would wait out
    //    one load latency per element (measured: the prep was latency-bound on these loads).
    {
        const bool vk = delta_aligned16(a.k, a.ldk), vq = delta_aligned16(a.q, a.ldq);
        constexpr int PER_ROW = DK / 4, NE = 64 * PER_ROW / 256;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        float4 xk[NE], xq[NE];
#pragma unroll
        for (int i = 0; i < NE; ++i) {
            const int e = tid + 256 * i, r = e / PER_ROW, c4 = (e % PER_ROW) * 4;
            const int t = t0 + r;
            xk[i] = t < T ? delta_ld4(a.k, a.ldk, t, kh * DK + c4, vk) : zero;
            xq[i] = has_out && t < T && t >= q0 ? delta_ld4(a.q, a.ldq, t - q0, kh * DK + c4, vq) : zero;
        }
        if constexpr (PRO) {
            // The prologue's L2 norms: at DK = 128 a warp's 32 float4 of load i are one row,
            // r = warp + 8 i, so each warp normalises its rows in registers; k's scales are kept
            // for step 4's second load of k. Rows past the prompt (or without a query) stay zero.
#pragma unroll
            for (int i = 0; i < NE; ++i) {
                const int r = (tid + 256 * i) / PER_ROW, t = t0 + r;
                const float sk = delta_l2_scale128(xk[i], a.keps, a.kscale);
                if (t < T) xk[i] = delta_mul4(xk[i], sk);
                if (lane == 0) Kn[r] = sk;
                if (has_out) {
                    const float sq = delta_l2_scale128(xq[i], a.qeps, a.qscale);
                    if (t < T && t >= q0) xq[i] = delta_mul4(xq[i], sq);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NE; ++i) {
            const int e = tid + 256 * i, r = e / PER_ROW, c4 = (e % PER_ROW) * 4;
            uint2 hv, lv;
            delta_split(xk[i].x, xk[i].y, 1.0f, &hv.x, &lv.x);
            delta_split(xk[i].z, xk[i].w, 1.0f, &hv.y, &lv.y);
            *reinterpret_cast<uint2*>(Kh + r * LDK + c4) = hv;
            *reinterpret_cast<uint2*>(Kl + r * LDK + c4) = lv;
            if (has_out) {
                delta_split(xq[i].x, xq[i].y, 1.0f, &hv.x, &lv.x);
                delta_split(xq[i].z, xq[i].w, 1.0f, &hv.y, &lv.y);
                *reinterpret_cast<uint2*>(Qh + r * LDK + c4) = hv;
                *reinterpret_cast<uint2*>(Ql + r * LDK + c4) = lv;
                if (owner) *reinterpret_cast<uint2*>(wk.qh + ck * 64 * DK + delta_img_h(r, c4)) = hv;
            }
        }
    }
    __syncthreads();
    if (tid >= 32 && tid < 64) Gs[tid] += Gs[31];
    __syncthreads();
    if (tid < 64) wk.g[ch * 64 + tid] = Gs[tid];

    // 3. Gram products with hi + lo operands: A (strict lower, f32 smem) from K K^T; P (lower
    //    incl. diagonal, hi + lo f16 workspace) from Q K^T. Warp: rows 16*(warp>>1), columns
    //    32*(warp&1) .. +31.
    {
        const int mt = warp >> 1, nh = warp & 1;
        const u32 khb = delta_smem_addr(Kh), klb = delta_smem_addr(Kl);
        const u32 qhb = delta_smem_addr(Qh), qlb = delta_smem_addr(Ql);
        for (int which = 0; which < 2; ++which) {
            if (which == 1 && !has_out) break;
            float acc[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
            const u32 ahb = which == 0 ? khb : qhb, alb = which == 0 ? klb : qlb;
#pragma unroll 2
            for (int kk = 0; kk < DK / 16; ++kk) {
                u32 ah[4], al[4];
                delta_ldsm_x4(ah, ahb + delta_off_rm(lane, 16 * mt, 16 * kk, LDK));
                delta_ldsm_x4(al, alb + delta_off_rm(lane, 16 * mt, 16 * kk, LDK));
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    u32 bh[4], bl[4];
                    delta_ldsm_x4(bh, khb + delta_off_tr(lane, 32 * nh + 16 * p, 16 * kk, LDK));
                    delta_ldsm_x4(bl, klb + delta_off_tr(lane, 32 * nh + 16 * p, 16 * kk, LDK));
                    delta_mma(acc[2 * p], ah, bh[0], bh[1]);
                    delta_mma(acc[2 * p], ah, bl[0], bl[1]);
                    delta_mma(acc[2 * p], al, bh[0], bh[1]);
                    delta_mma(acc[2 * p + 1], ah, bh[2], bh[3]);
                    delta_mma(acc[2 * p + 1], ah, bl[2], bl[3]);
                    delta_mma(acc[2 * p + 1], al, bh[2], bh[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = 16 * mt + gq + 8 * hr;
                    const int j = 32 * nh + 8 * nt + 2 * tq;
                    const float gi = Gs[i];
                    float x0 = acc[nt][2 * hr], x1 = acc[nt][2 * hr + 1];
                    if (which == 0) {
                        const float bi = Bs[i];
                        x0 = j < i ? bi * x0 * expf(gi - Gs[j]) : 0.0f;
                        x1 = j + 1 < i ? bi * x1 * expf(gi - Gs[j + 1]) : 0.0f;
                        *reinterpret_cast<float2*>(Am + i * DELTA_LDA + j) = make_float2(x0, x1);
                    } else {
                        x0 = j <= i ? x0 * expf(gi - Gs[j]) : 0.0f;
                        x1 = j + 1 <= i ? x1 * expf(gi - Gs[j + 1]) : 0.0f;
                        u32 ph, pl;
                        delta_split(x0, x1, 1.0f, &ph, &pl);
                        *reinterpret_cast<u32*>(wk.p + ch * 8192 + delta_img_h(i, j)) = ph;
                        *reinterpret_cast<u32*>(wk.p + ch * 8192 + 4096 + delta_img_h(i, j)) = pl;
                    }
                }
            }
        }
    }
    __syncthreads();  // A complete; K, Q tiles (region X) free

    // 4. Warps 0-1: diagonal 16x16 blocks of T by forward substitution (thread = block, column).
    //    Warps 2-7: beta*exp(G)*K (f16) and beta*V (scaled hi + lo f16) for the second products.
    if (warp < 2) {
        const int b = tid >> 4, cc = tid & 15;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const float* arow = Am + (16 * b + r) * DELTA_LDA + 16 * b;
            float s0 = r == cc ? 1.0f : 0.0f, s1 = 0.0f;
#pragma unroll
            for (int q = 0; q < r; q += 2) {
                s0 = fmaf(-arow[q], x[q], s0);
                if (q + 1 < r) s1 = fmaf(-arow[q + 1], x[q + 1], s1);
            }
            x[r] = s0 + s1;
        }
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            Tf[(16 * b + r) * DELTA_LDA + 16 * b + cc] = x[r];
            Tm[(16 * b + r) * DELTA_LDT + 16 * b + cc] = __float2half_rn(x[r]);
        }
    } else {
        // k (again, from L2) and v: all loads issued first, as in step 2; v is read once.
        const int bt = tid - 64;  // 0 .. 191
        const bool vk = delta_aligned16(a.k, a.ldk), vv = delta_aligned16(a.v, a.ldv);
        constexpr int PER_ROW = DK / 4, NK = (64 * PER_ROW + 191) / 192, NV = (64 * DELTA_DV_MAX / 4 + 191) / 192;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        const int vrow = dv / 4;
        float4 xk[NK], xv[NV];
#pragma unroll
        for (int i = 0; i < NK; ++i) {
            const int e = bt + 192 * i, r = e / PER_ROW, c4 = (e % PER_ROW) * 4;
            const int t = t0 + r;
            xk[i] = e < 64 * PER_ROW && t < T ? delta_ld4(a.k, a.ldk, t, kh * DK + c4, vk) : zero;
        }
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int e = bt + 192 * i, r = e / vrow, c4 = (e % vrow) * 4;
            const int t = t0 + r;
            xv[i] = e < 64 * vrow && t < T ? delta_ld4(a.v, a.ldv, t, h * dv + c4, vv) : zero;
        }
        // While those loads are in flight: the f16 k tile (still intact in region X) transposed
        // to the workspace, K^T [dk][64] (the scan's A operand of the state update), 8 tokens of
        // one key dimension a 16-byte store, from the owner block.
        if (owner) {
            const unsigned short* kb = reinterpret_cast<const unsigned short*>(Kh);
            __half* kt = wk.kh + ck * 64 * DK;
            for (int e = bt; e < DK * 8; e += 192) {
                const int d = e % DK, r0 = (e / DK) * 8;
                u32 w[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    w[j] = (u32)kb[(r0 + 2 * j) * LDK + d] | ((u32)kb[(r0 + 2 * j + 1) * LDK + d] << 16);
                *reinterpret_cast<uint4*>(kt + delta_img_h(d, r0)) = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
#pragma unroll
        for (int i = 0; i < NK; ++i) {
            const int e = bt + 192 * i, r = e / PER_ROW, c4 = (e % PER_ROW) * 4;
            if (e < 64 * PER_ROW) {
                const float s = Bs[r] * expf(Gs[r]);
                float4 x = xk[i];
                if constexpr (PRO) {
                    if (t0 + r < T) x = delta_mul4(x, Kn[r]);  // the normed k of step 2
                }
                *reinterpret_cast<uint2*>(Bk + r * LDK + c4) =
                    make_uint2(delta_h2(x.x * s, x.y * s), delta_h2(x.z * s, x.w * s));
            }
        }
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int e = bt + 192 * i, r = e / vrow;
            if (e < 64 * vrow && t0 + r < T) {
                const float4 x = xv[i];
                const float b = Bs[r];
                m = fmaxf(m, fmaxf(fmaxf(fabsf(x.x * b), fabsf(x.y * b)), fmaxf(fabsf(x.z * b), fabsf(x.w * b))));
            }
        }
        m = warp_max(m);
        if (lane == 0) red[warp] = m;
        named_bar_sync(1, 192);
        m = fmaxf(fmaxf(fmaxf(red[2], red[3]), fmaxf(red[4], red[5])), fmaxf(red[6], red[7]));
        float inv;
        const float sc = delta_scale(m, &inv);
        if (bt == 0) red[8] = inv;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int e = bt + 192 * i, r = e / vrow, c4 = (e % vrow) * 4;
            if (e < 64 * vrow) {
                const float4 x = xv[i];
                const float b = Bs[r];
                u32 h0, l0, h1, l1;
                delta_split(x.x * b, x.y * b, sc, &h0, &l0);
                delta_split(x.z * b, x.w * b, sc, &h1, &l1);
                *reinterpret_cast<uint2*>(Vh + r * LDV + c4) = make_uint2(h0, h1);
                *reinterpret_cast<uint2*>(Vl + r * LDV + c4) = make_uint2(l0, l1);
            }
        }
    }
    __syncthreads();

    // 5. Off-diagonal blocks of T, by block sub-diagonal d:
    //    T_IJ = -T_II * sum_{M=J}^{I-1} A_IM T_MJ  (I = J + d).
    {
        const int r = tid >> 4, col = tid & 15;
        for (int d = 1; d < 4; ++d) {
            for (int J = 0; J + d < 4; ++J) {
                const int I = J + d;
                float z0 = 0.0f, z1 = 0.0f;
                for (int M = J; M < I; ++M) {
                    const float* arow = Am + (16 * I + r) * DELTA_LDA + 16 * M;
                    const float* tcol = Tf + (16 * M) * DELTA_LDA + 16 * J + col;
#pragma unroll
                    for (int k = 0; k < 16; k += 2) {
                        z0 = fmaf(arow[k], tcol[k * DELTA_LDA], z0);
                        z1 = fmaf(arow[k + 1], tcol[(k + 1) * DELTA_LDA], z1);
                    }
                }
                Z[J * 256 + r * 16 + col] = z0 + z1;
            }
            __syncthreads();
            for (int J = 0; J + d < 4; ++J) {
                const int I = J + d;
                const float* trow = Tf + (16 * I + r) * DELTA_LDA + 16 * I;
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int k = 0; k < 16; k += 2) {
                    s0 = fmaf(trow[k], Z[J * 256 + k * 16 + col], s0);
                    s1 = fmaf(trow[k + 1], Z[J * 256 + (k + 1) * 16 + col], s1);
                }
                const float tv = -(s0 + s1);
                Tf[(16 * I + r) * DELTA_LDA + 16 * J + col] = tv;
                Tm[(16 * I + r) * DELTA_LDT + 16 * J + col] = __float2half_rn(tv);
            }
            __syncthreads();
        }
    }

    // 6. W = T * (beta exp(G) K) -> f16, U = T * (beta V) -> f32. T is lower triangular, so the
    //    k-blocks past the diagonal block are skipped (never read). Warp: rows 16*(warp>>1),
    //    columns half (warp&1).
    {
        const int mt = warp >> 1, nh = warp & 1;
        const u32 tbase = delta_smem_addr(Tm);
        const u32 bkb = delta_smem_addr(Bk), vhb = delta_smem_addr(Vh), vlb = delta_smem_addr(Vl);
        const float inv = red[8];
        __half* wout = wk.w + ch * 64 * DK;
        float* uout = wk.u + ch * 64 * dv;
        // W: DK/2 columns per warp, in pairs of n8 tiles.
        for (int p = 0; p < DK / 32; ++p) {
            const int n0 = nh * (DK / 2) + 16 * p;
            float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            for (int kk = 0; kk <= mt; ++kk) {
                u32 af[4], bf[4];
                delta_ldsm_x4(af, tbase + delta_off_rm(lane, 16 * mt, 16 * kk, DELTA_LDT));
                delta_ldsm_x4_t(bf, bkb + delta_off_rm(lane, 16 * kk, n0, LDK));
                delta_mma(acc[0], af, bf[0], bf[1]);
                delta_mma(acc[1], af, bf[2], bf[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = 16 * mt + gq + 8 * hr, j = n0 + 8 * nt + 2 * tq;
                    *reinterpret_cast<u32*>(wout + delta_img_h(i, j)) = delta_h2(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
                }
        }
        // U: dv/2 columns per warp.
        for (int p = 0; p < dv / 32; ++p) {
            const int n0 = nh * (dv / 2) + 16 * p;
            float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            for (int kk = 0; kk <= mt; ++kk) {
                u32 af[4], bh[4], bl[4];
                delta_ldsm_x4(af, tbase + delta_off_rm(lane, 16 * mt, 16 * kk, DELTA_LDT));
                delta_ldsm_x4_t(bh, vhb + delta_off_rm(lane, 16 * kk, n0, LDV));
                delta_ldsm_x4_t(bl, vlb + delta_off_rm(lane, 16 * kk, n0, LDV));
                delta_mma(acc[0], af, bh[0], bh[1]);
                delta_mma(acc[0], af, bl[0], bl[1]);
                delta_mma(acc[1], af, bh[2], bh[3]);
                delta_mma(acc[1], af, bl[2], bl[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = 16 * mt + gq + 8 * hr, j = n0 + 8 * nt + 2 * tq;
                    *reinterpret_cast<float2*>(uout + delta_img_u(i, j)) =
                        make_float2(acc[nt][2 * hr] * inv, acc[nt][2 * hr + 1] * inv);
                }
        }
    }
}

// Shapes the kernels support (anything else: they return without writing).
__device__ __forceinline__ bool delta_shape_ok(const DeltaArgs& a) {
    return (a.dk == 64 || a.dk == 128) && a.dv >= 32 && a.dv <= DELTA_DV_MAX && a.dv % 32 == 0 && a.Hk > 0 &&
           a.Hv % a.Hk == 0 && a.R >= 0 && a.R <= a.T;
}

extern "C" __global__ void __launch_bounds__(256, 2) delta_rule_chunk_prep(DeltaArgs a) {
    pdl_enter();
    TALLY_DYNAMIC_SMEM(delta_sm);
    if (!delta_shape_ok(a)) return;  // kx is not read: the host takes delta_rule_chunk_prep_pro
    if (a.dk == 128) delta_prep_body<128, false>(a, delta_sm);
    else if (a.dk == 64) delta_prep_body<64, false>(a, delta_sm);
}

// The same with the fused prologue (TALLY_DELTA_PREP=prologue; kx set, dk = 128): its own
// kernel, so the plain prep's code and registers are as before. The same grid, block and
// dynamic shared memory.
extern "C" __global__ void __launch_bounds__(256, 2) delta_rule_chunk_prep_pro(DeltaArgs a) {
    pdl_enter();
    TALLY_DYNAMIC_SMEM(delta_sm);
    if (!delta_shape_ok(a) || !a.kx || a.dk != 128) return;
    delta_prep_body<128, true>(a, delta_sm);
}

// ---------------------------------------------------------------------------------------------
// delta_rule_chunk_scan: one block per (value head, 32 columns of S), 256 threads = two warpgroups,
// chunks in order, every product on wgmma (wgmma.cuh; both operands from shared memory).
// Warpgroup 0 holds this block's S (dk x 32, f32) in registers (thread: rows 64m + 16w + g (+8),
// m < dk/64, columns 8n + 2t (+1): the m64n32 accumulator layout) and does the recurrence;
// warpgroup 1 does the outputs. Per chunk c (barriers #0..#2 of the whole block):
//   #0  A(c) = {W, Q, U, G} landed; S hi/lo (B operand: S^T, scaled by 2^sS) stored by WG0
//       then copies of B(c) = {K^T, P hi, P lo} go out
//   WG0: X = W S (hi + lo) -> vnew = U - X 2^-sS (registers), max|vnew|
//   WG1: Y = Q S (hi + lo), kept as exp(G) Y 2^-sS                   (only if the chunk has outputs)
//   #1  then copies of A(c+1); scale 2^sv from max|vnew|; WG0 stores vnew and exp(G_last - G) vnew
//       as hi/lo B operands; WG1 rescales Y by 2^sv
//   #2  B(c) landed
//   WG0: S = exp(G_last) S + K^T (exp(G_last - G) vnew) 2^-sv;  max|S| (named barrier 1, WG0);
//        S hi/lo -> shared memory (skipped after the last chunk)
//   WG1: o = (Y + P vnew) 2^-sv -> global
// The same operands and hi/lo splits as the products had on mma.sync, so the same precision.
//
// ST = 1 (delta_rule_chunk_scan): one set of A and B buffers, so B(c) goes out at #0 of chunk c
// and is waited for at #2, and A(c + 1) goes out at #1 and is waited for at the next #0: each
// copy has half a chunk's work to arrive in, and what it lacks is on the chain of 128 chunks.
// ST = 2 (delta_rule_chunk_scan2): two sets (delta_scan_layout's stages), chunk c's in set c % 2;
// A(c + 1) and B(c + 1) go out together at #0 of chunk c, into the set chunk c - 1 read (its
// last reads, of A by #1 and of B by the end of chunk c - 1, are behind that barrier), so each
// has a whole chunk to arrive in. The same values reach the same products in the same order: the
// outputs are ST = 1's bit for bit (lab/delta/emu_test.cpp checks it).

template <int DK, int ST>
__device__ __forceinline__ void delta_scan_body(const DeltaArgs& a, unsigned char* sm_raw) {
    static_assert(ST == 1 || ST == 2, "one or two sets of copied operands");
    constexpr int MS = DK / 64;  // m64 blocks of S's rows
    const DeltaScanSmem L = delta_scan_layout(DK, ST);
    const u32 raw = delta_smem_addr(sm_raw);
    const u32 sbase = (raw + 1023u) & ~1023u;  // the swizzle needs 1024-byte aligned blocks
    unsigned char* sm = sm_raw + (sbase - raw);
    float* red = (float*)(sm + L.red);

    const int h = blockIdx.x, n0 = blockIdx.y * DELTA_NS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, w4 = warp & 3;
    const int gq = lane >> 2, tq = lane & 3;
    const int T = a.T, dv = a.dv;
    const int kh = h % a.Hk;
    const int q0 = T - a.R;
    const int nc = (int)delta_chunks(T);
    const DeltaWork wk = delta_work_split(a);
    float* st = a.state + (i64)h * DK * dv + n0;

    float S[MS][16];  // warpgroup 0 only

    // Thread 0: the bulk copies of chunk cc's {W, Q, U slice, G} (mbarrier A) and {K^T, P hi + lo}
    // (mbarrier B); the workspace holds them as the images of these shared-memory tiles. Chunk
    // cc's set is cc % ST (offset set_off), its barriers A, B at L.mb + 16 (cc % ST), their
    // phase of parity (cc / ST) & 1.
    auto set_off = [&](int cc) { return (u32)((cc % ST) * L.stage); };
    auto mb_a = [&](int cc) { return sbase + L.mb + 16u * (u32)(cc % ST); };
    auto mb_b = [&](int cc) { return mb_a(cc) + 8u; };
    auto parity = [&](int cc) { return (u32)((cc / ST) & 1); };
    auto issue_a = [&](int cc) {
        const i64 ch = (i64)cc * a.Hv + h, ck = (i64)cc * a.Hk + kh;
        const bool out = a.R > 0 && cc * DELTA_C + DELTA_C > q0;
        const u32 so = sbase + set_off(cc), mb = mb_a(cc);
        mbar_expect_tx(mb, (u32)(64 * DK * 2 * (out ? 2 : 1) + 64 * 32 * 4 + 64 * 4));
        bulk_g2s(so + L.wt, wk.w + ch * 64 * DK, 64 * DK * 2, mb);
        if (out) bulk_g2s(so + L.qt, wk.qh + ck * 64 * DK, 64 * DK * 2, mb);
        bulk_g2s(so + L.ub, wk.u + ch * 64 * dv + (n0 / 32) * 2048, 64 * 32 * 4, mb);
        bulk_g2s(so + L.gb, wk.g + ch * 64, 64 * 4, mb);
    };
    auto issue_b = [&](int cc) {
        const i64 ch = (i64)cc * a.Hv + h, ck = (i64)cc * a.Hk + kh;
        const bool out = a.R > 0 && cc * DELTA_C + DELTA_C > q0;
        const u32 so = sbase + set_off(cc), mb = mb_b(cc);
        mbar_expect_tx(mb, (u32)(DK * 64 * 2 + (out ? 2 * 64 * 64 * 2 : 0)));
        bulk_g2s(so + L.kt, wk.kh + ck * 64 * DK, DK * 64 * 2, mb);
        if (out) bulk_g2s(so + L.ph, wk.p + ch * 8192, 2 * 64 * 64 * 2, mb);
    };
    // Warpgroup 0's max of m (named barrier 1: warpgroup 1 does not take part), through red[slot..+3].
    auto wg0_max = [&](float m, int slot) {
        m = warp_max(m);
        if (lane == 0) red[slot + w4] = m;
        named_bar_sync(1, 128);
        return fmaxf(fmaxf(red[slot], red[slot + 1]), fmaxf(red[slot + 2], red[slot + 3]));
    };
    auto local_max_s = [&]() {
        float m = 0.0f;
#pragma unroll
        for (int mb = 0; mb < MS; ++mb)
#pragma unroll
            for (int e = 0; e < 16; ++e) m = fmaxf(m, fabsf(S[mb][e]));
        return m;
    };
    // Warpgroup 0: S scaled by 2^sS as hi + lo f16, stored transposed (S^T: rows n, K = dk) as the
    // B operand of the next chunk's products (stmatrix .trans: the accumulator layout's 8 x 8
    // blocks, each row n of a block 8 consecutive k, one 16-byte chunk; lane l addresses row l % 8
    // of block l / 8 = nt); 2^-sS to red[12] (read after the next #0).
    auto store_s = [&](float m_all) {
        float inv;
        const float sc = delta_scale(m_all, &inv);
        if (tid == 0) red[12] = inv;
#pragma unroll
        for (int mb = 0; mb < MS; ++mb)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                u32 hi[4], lo[4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
                    delta_split(S[mb][4 * nt + 2 * hr], S[mb][4 * nt + 2 * hr + 1], sc, &hi[nt], &lo[nt]);
                const u32 o = delta_kmaj(32, lane, 64 * mb + 16 * w4 + 8 * hr);
                delta_stsm_x4_t(sbase + L.sh + o, hi);
                delta_stsm_x4_t(sbase + L.sl + o, lo);
            }
    };

    if (tid == 0) {
#pragma unroll
        for (int st = 0; st < ST; ++st) {
            mbar_init(mb_a(st), 1);
            mbar_init(mb_b(st), 1);
        }
        mbar_init_fence();
        if (nc > 0) issue_a(0);
        if (ST == 2 && nc > 0) issue_b(0);
    }

    // Initial state (read once; this block alone writes these columns at the end).
    if (wg == 0) {
#pragma unroll
        for (int mb = 0; mb < MS; ++mb)
#pragma unroll
            for (int e = 0; e < 16; ++e) {
                const int i = 64 * mb + 16 * w4 + gq + 8 * ((e >> 1) & 1), j = 8 * (e >> 2) + 2 * tq + (e & 1);
                S[mb][e] = st[(i64)i * dv + j];
            }
        store_s(wg0_max(local_max_s(), 4));
    }
    __syncthreads();  // the mbarriers initialised before anyone waits on them

    for (int c = 0; c < nc; ++c) {
        const bool out = a.R > 0 && c * DELTA_C + DELTA_C > q0;
        const u32 so = set_off(c);
        const float* Ub = (const float*)(sm + so + L.ub);
        const float* Gb = (const float*)(sm + so + L.gb);
        mbar_wait(mb_a(c), parity(c));    // A(c) landed
        if (wg == 0) fence_proxy_async();  // this thread's S stores, seen by the tensor cores
        __syncthreads();         // #0 (at c = 0 also: the mbarriers initialised)
        if (tid == 0) {
            fence_proxy_async();  // the last chunk's generic reads, before the copies overwrite
            if constexpr (ST == 1) {
                issue_b(c);
            } else if (c + 1 < nc) {
                issue_a(c + 1);
                issue_b(c + 1);
            }
        }

        const float invS = red[12];
        const float gl = Gb[63];
        const float egl = expf(gl);
        float acc[16];
        float vn[4][4];  // vnew (warpgroup 0)
        float el[2];     // exp(G_last - G_i) for rows g, g + 8 (warpgroup 0); exp(G_i) 2^-sS (1)
        float mv = 0.0f;
        if (wg == 0 || out) {
            const u32 ab = sbase + so + (wg == 0 ? L.wt : L.qt);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < DK / 16; ++kk) {
                const u64 ad = wg_desc(ab + (kk >> 2) * (64 * 128) + 32 * (kk & 3));
                const u32 bo = (kk >> 2) * (32 * 128) + 32 * (kk & 3);
                WgmmaSS<32>::mma(acc, ad, wg_desc(sbase + L.sh + bo), kk == 0 ? 0 : 1);
                WgmmaSS<32>::mma(acc, ad, wg_desc(sbase + L.sl + bo));
            }
            wg_commit();
            wg_wait<0>();
            if (wg == 0) {
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) el[hr] = expf(gl - Gb[16 * w4 + gq + 8 * hr]);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int i = 16 * w4 + gq + 8 * hr, j = 8 * nt + 2 * tq;
                        const float2 u = *reinterpret_cast<const float2*>(Ub + delta_img_u(i, j));
                        vn[nt][2 * hr] = u.x - acc[4 * nt + 2 * hr] * invS;
                        vn[nt][2 * hr + 1] = u.y - acc[4 * nt + 2 * hr + 1] * invS;
                        mv = fmaxf(mv, fmaxf(fabsf(vn[nt][2 * hr]), fabsf(vn[nt][2 * hr + 1])));
                    }
            } else {
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) el[hr] = expf(Gb[16 * w4 + gq + 8 * hr]) * invS;
            }
        }
        mv = warp_max(mv);
        if (wg == 0 && lane == 0) red[w4] = mv;
        __syncthreads();  // #1: W, Q, U, G, S hi/lo consumed; red[0..3] ready

        if (ST == 1 && tid == 0 && c + 1 < nc) {
            fence_proxy_async();
            issue_a(c + 1);
        }

        float invv;
        const float scv = delta_scale(fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])), &invv);
        if (wg == 0) {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                u32 vh[4], vl[4], xh[4], xl[4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    delta_split(vn[nt][2 * hr], vn[nt][2 * hr + 1], scv, &vh[nt], &vl[nt]);
                    delta_split(vn[nt][2 * hr] * el[hr], vn[nt][2 * hr + 1] * el[hr], scv, &xh[nt], &xl[nt]);
                }
                const u32 o = delta_kmaj(32, lane, 16 * w4 + 8 * hr);
                delta_stsm_x4_t(sbase + L.vh + o, vh);
                delta_stsm_x4_t(sbase + L.vl + o, vl);
                delta_stsm_x4_t(sbase + L.xh + o, xh);
                delta_stsm_x4_t(sbase + L.xl + o, xl);
            }
        } else if (out) {
            // exp(G_i) 2^-sS Y, in units of 2^-sv (a power of two: exact): o = (this + P vnew') 2^-sv.
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[4 * nt + e] = acc[4 * nt + e] * el[e >> 1] * scv;
        }
        mbar_wait(mb_b(c), parity(c));    // B(c) landed
        if (wg == 0) fence_proxy_async();  // the vnew / X stores
        __syncthreads();         // #2

        if (wg == 0) {
            float acc2[MS][16];
            wg_fence();
#pragma unroll
            for (int mb = 0; mb < MS; ++mb)
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    const u64 ad = wg_desc(sbase + so + L.kt + mb * (64 * 128) + 32 * kk);
                    WgmmaSS<32>::mma(acc2[mb], ad, wg_desc(sbase + L.xh + 32 * kk), kk == 0 ? 0 : 1);
                    WgmmaSS<32>::mma(acc2[mb], ad, wg_desc(sbase + L.xl + 32 * kk));
                }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int mb = 0; mb < MS; ++mb)
#pragma unroll
                for (int e = 0; e < 16; ++e) S[mb][e] = fmaf(egl, S[mb][e], acc2[mb][e] * invv);
            if (c + 1 < nc) store_s(wg0_max(local_max_s(), 4));
        } else if (out) {
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const u64 ph = wg_desc(sbase + so + L.ph + 32 * kk), pl = wg_desc(sbase + so + L.pl + 32 * kk);
                const u64 vh = wg_desc(sbase + L.vh + 32 * kk), vl = wg_desc(sbase + L.vl + 32 * kk);
                WgmmaSS<32>::mma(acc, ph, vh);
                WgmmaSS<32>::mma(acc, ph, vl);
                WgmmaSS<32>::mma(acc, pl, vh);
            }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = 16 * w4 + gq + 8 * hr;
                const int t = c * DELTA_C + i;
                if (t < T && t >= q0) {
                    float* orow = a.o + (i64)(t - q0) * a.ldo + (i64)h * dv + n0;
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        const int j = 8 * nt + 2 * tq;
                        orow[j] = acc[4 * nt + 2 * hr] * invv;
                        orow[j + 1] = acc[4 * nt + 2 * hr + 1] * invv;
                    }
                }
            }
        }
    }
    if (wg == 0) {
#pragma unroll
        for (int mb = 0; mb < MS; ++mb)
#pragma unroll
            for (int e = 0; e < 16; ++e) {
                const int i = 64 * mb + 16 * w4 + gq + 8 * ((e >> 1) & 1), j = 8 * (e >> 2) + 2 * tq + (e & 1);
                st[(i64)i * dv + j] = S[mb][e];
            }
    }
}

extern "C" __global__ void __launch_bounds__(256, 1) delta_rule_chunk_scan(DeltaArgs a) {
    pdl_enter();
    TALLY_DYNAMIC_SMEM(delta_sm);
    if (!delta_shape_ok(a)) return;
    if (a.dk == 128) delta_scan_body<128, 1>(a, delta_sm);
    else if (a.dk == 64) delta_scan_body<64, 1>(a, delta_sm);
}

// The same with two sets of copied operands (delta_scan_smem_bytes(dk, 2): 183,392 B at dk 128),
// each chunk's copies issued a whole chunk ahead; the same outputs bit for bit.
// TALLY_DELTA_SCAN=ring picks it (ops/delta.rs).
extern "C" __global__ void __launch_bounds__(256, 1) delta_rule_chunk_scan2(DeltaArgs a) {
    pdl_enter();
    TALLY_DYNAMIC_SMEM(delta_sm);
    if (!delta_shape_ok(a)) return;
    if (a.dk == 128) delta_scan_body<128, 2>(a, delta_sm);
    else if (a.dk == 64) delta_scan_body<64, 2>(a, delta_sm);
}

// ---------------------------------------------------------------------------------------------
// delta_rule_step: token by token, f32 throughout (decode and short prompts). One block per
// (value head, 32 columns), 128 threads: warp w owns columns 8w..8w+7; lane = column (l & 7) x
// row quarter (l >> 3), each thread DK/4 rows of its column in registers.

// The fused prologue's L2 norm of one key head's row x (DK values) into s_out: norm_rows' code
// for a group of DK at its block size for that group (128 threads, ops/norm.rs norm_threads;
// this kernel's block), thread i element i, so every value is norm_rows' bit for bit.
template <int DK>
__device__ __forceinline__ void delta_l2_row(const float* x, float eps, float scale, float* s_out, float* red) {
    const int tid = threadIdx.x;
    const float v = tid < DK ? x[tid] : 0.0f;
    float ss = 0.0f;
    if (tid < DK) ss += v * v;
    ss = block_sum(ss, red);
    const float s = rsqrtf(ss + eps) * scale;
    if (tid < DK) s_out[tid] = v * s;
}

// MULTI: the prologue over T <= 16 tokens (q's R <= T rows the last ones: delta_rule_step_pro);
// else one token with it (delta_rule_step: T = R = 1, its code as before stop 54).
template <int DK, bool MULTI>
__device__ __forceinline__ void delta_step_body(const DeltaArgs& a) {
    constexpr int RQ = DK / 4;
    __shared__ float ks[128], qs[128], red[32];
    const int h = blockIdx.x, n0 = blockIdx.y * DELTA_NS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int col = n0 + 8 * warp + (lane & 7), rq = lane >> 3;
    const int T = a.T, dv = a.dv, kh = h % a.Hk, q0 = T - a.R;
    float* st = a.state + (i64)h * DK * dv + col;
    float S[RQ];
#pragma unroll
    for (int r = 0; r < RQ; ++r) S[r] = st[(i64)(rq * RQ + r) * dv];
    for (int t = 0; t < T; ++t) {
        const bool out = t >= q0;
        float decay, b;
        __syncthreads();
        if (a.kx) {  // the fused prologue (checked at the entry)
            if constexpr (MULTI) {  // token t's k row; q's R rows are the last of the T (q0 = T - R)
                delta_l2_row<DK>(a.kx + (i64)t * a.ldkx + kh * DK, a.keps, a.kscale, ks, red);
                if (out) delta_l2_row<DK>(a.qx + (i64)(t - q0) * a.ldqx + kh * DK, a.qeps, a.qscale, qs, red);
            } else {  // T = R = 1
                delta_l2_row<DK>(a.kx + kh * DK, a.keps, a.kscale, ks, red);
                delta_l2_row<DK>(a.qx + kh * DK, a.qeps, a.qscale, qs, red);
            }
            // delta_gates' expressions for (t, h).
            const float bv = a.gb[(i64)t * a.ldgb + h], av = a.ga[(i64)t * a.ldga + h];
            b = 1.0f / (1.0f + expf(-bv));
            const float gv = a.ssm_a[h] * gates_softplus(av + a.dt_bias[h]);
            if (blockIdx.y == 0 && tid == 0) {
                a.beta_out[(i64)t * a.ldb + h] = b;
                a.g_out[(i64)t * a.ldg + h] = gv;
            }
            decay = expf(gv);
        } else {
            if (tid < DK) {
                ks[tid] = a.k[(i64)t * a.ldk + kh * DK + tid];
                if (out) qs[tid] = a.q[(i64)(t - q0) * a.ldq + kh * DK + tid];
            }
            decay = expf(a.g[(i64)t * a.ldg + h]);
            b = a.beta[(i64)t * a.ldb + h];
        }
        __syncthreads();
        const float vj = a.v[(i64)t * a.ldv + (i64)h * dv + col];
        float kv = 0.0f;
#pragma unroll
        for (int r = 0; r < RQ; ++r) {
            S[r] *= decay;
            kv = fmaf(S[r], ks[rq * RQ + r], kv);
        }
        kv += __shfl_xor_sync(0xffffffffu, kv, 8);
        kv += __shfl_xor_sync(0xffffffffu, kv, 16);
        const float d = (vj - kv) * b;
#pragma unroll
        for (int r = 0; r < RQ; ++r) S[r] = fmaf(ks[rq * RQ + r], d, S[r]);
        if (out) {
            float ov = 0.0f;
#pragma unroll
            for (int r = 0; r < RQ; ++r) ov = fmaf(S[r], qs[rq * RQ + r], ov);
            ov += __shfl_xor_sync(0xffffffffu, ov, 8);
            ov += __shfl_xor_sync(0xffffffffu, ov, 16);
            if (rq == 0) a.o[(i64)(t - q0) * a.ldo + (i64)h * dv + col] = ov;
        }
        if (a.snap) {
            float* sn = a.snap + (i64)t * a.snap_ld + (i64)h * DK * dv + col;
#pragma unroll
            for (int r = 0; r < RQ; ++r) sn[(i64)(rq * RQ + r) * dv] = S[r];
        }
    }
#pragma unroll
    for (int r = 0; r < RQ; ++r) st[(i64)(rq * RQ + r) * dv] = S[r];
}

extern "C" __global__ void __launch_bounds__(128) delta_rule_step(DeltaArgs a) {
    pdl_enter();
    if (!delta_shape_ok(a) || (a.kx && (a.T != 1 || a.R != 1))) return;
    if (a.dk == 128) delta_step_body<128, false>(a);
    else if (a.dk == 64) delta_step_body<64, false>(a);
}

// delta_rule_step_pro: the same with the fused prologue over T <= 16 tokens (a verification
// batch, a short prompt; R <= T), its own kernel so that the one-token step's code stays as it
// was (stop 54 measured tg128 -0.4% with both in one body).
extern "C" __global__ void __launch_bounds__(128) delta_rule_step_pro(DeltaArgs a) {
    pdl_enter();
    if (!delta_shape_ok(a) || !a.kx || a.R > a.T) return;
    if (a.dk == 128) delta_step_body<128, true>(a);
    else if (a.dk == 64) delta_step_body<64, true>(a);
}
