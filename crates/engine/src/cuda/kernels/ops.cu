// Small ops of the plan: norms, RoPE, the KV cache store, element-wise maps, router top-k, MoE
// combine, shared gate.
// Each mirrors the CPU reference op of the same name (crates/engine/src/cpu/ops/).
#include "common.cuh"

// ---------------------------------------------------------------------------------------------
// RMS / L2 norm over groups of `group` columns. One block per (row, group).
// rms: y = x * rsqrt(mean(x^2) + eps) * w[0..group]
// l2:  y = x * rsqrt(sum(x^2) + eps) * scale
struct NormArgs {
    const float* x; i64 ldx;
    const float* w;            // null for the L2 norm
    float* y; i64 ldy;
    i32 rows, cols, group;
    float eps, scale;
    i32 l2;                    // 1: L2 norm, 0: RMS norm
};

extern "C" __global__ void norm_rows(NormArgs a) {
    __shared__ float red[32];
    const int groups = a.cols / a.group;
    const int row = blockIdx.x / groups;
    const int g = blockIdx.x % groups;
    if (row >= a.rows) return;
    const float* x = a.x + (i64)row * a.ldx + (i64)g * a.group;
    float* y = a.y + (i64)row * a.ldy + (i64)g * a.group;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = x[i];
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float denom = a.l2 ? ss : ss / (float)a.group;
    const float s = rsqrtf(denom + a.eps) * (a.l2 ? a.scale : 1.0f);
    for (int i = threadIdx.x; i < a.group; i += blockDim.x) {
        const float v = x[i] * s;
        y[i] = a.w ? v * a.w[i] : v;
    }
}

// ---------------------------------------------------------------------------------------------
// NeoX RoPE on the first `dims` columns of every head; row r is at position pos0 + *pos + r (pos the
// batch position, device data: one captured graph serves every position).
// One thread per (row, head, column of the head). Columns >= dims are copied. Thread i < dims/2
// rotates the pair (i, i + dims/2) and writes both; threads dims/2 <= c < dims have nothing to do.
// So no thread reads an element another thread writes: in place (x == y, as the plan's q RoPE
// node runs) is race-free.
struct RopeArgs {
    const float* x; i64 ldx;
    float* y; i64 ldy;
    i32 rows, n_heads, head_dim, dims, pos0;
    float theta;
    const i32* pos;            // the batch position (n_past); null: 0
};

extern "C" __global__ void rope_neox(RopeArgs a) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 total = (i64)a.rows * a.n_heads * a.head_dim;
    if (idx >= total) return;
    const int c = (int)(idx % a.head_dim);
    const int h = (int)((idx / a.head_dim) % a.n_heads);
    const int r = (int)(idx / ((i64)a.head_dim * a.n_heads));
    const float* xr = a.x + (i64)r * a.ldx + (i64)h * a.head_dim;
    float* yr = a.y + (i64)r * a.ldy + (i64)h * a.head_dim;
    const int half = a.dims / 2;
    if (c >= a.dims) {
        yr[c] = xr[c];
        return;
    }
    if (c >= half) return;  // column c - half's thread writes this one
    const int i = c;
    // Frequencies as the reference computes them: 1 / theta^(2i/dims) in f32.
    const float inv_freq = 1.0f / powf(a.theta, (float)(2 * i) / (float)a.dims);
    const int p0 = a.pos0 + (a.pos ? *a.pos : 0);
    const float ang = (float)(p0 + r) * inv_freq;
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float x0 = xr[i], x1 = xr[i + half];  // both read before either is written
    yr[i] = x0 * cs - x1 * sn;
    yr[i + half] = x1 * cs + x0 * sn;
}

// ---------------------------------------------------------------------------------------------
// KV cache store: rows r < rows of k and v go to rows *pos + r of the caches (pos the batch
// position, device data); rows past `cap` are never written. grid (ceil(rows * cols / 256), 2):
// grid.y 0 stores K, 1 stores V.
struct KvStoreArgs {
    const float* k; i64 ldk;
    const float* v; i64 ldv;
    float* kc; i64 ldkc;
    float* vc; i64 ldvc;
    const i32* pos;
    i32 rows, cols, cap;
};

extern "C" __global__ void kv_store(KvStoreArgs a) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)a.rows * a.cols || blockIdx.y > 1) return;
    const int r = (int)(idx / a.cols), c = (int)(idx % a.cols);
    const int dst = *a.pos + r;
    if (dst < 0 || dst >= a.cap) return;
    if (blockIdx.y == 0) {
        a.kc[(i64)dst * a.ldkc + c] = a.k[(i64)r * a.ldk + c];
    } else {
        a.vc[(i64)dst * a.ldvc + c] = a.v[(i64)r * a.ldv + c];
    }
}

// ---------------------------------------------------------------------------------------------
// Binary element-wise maps over [rows, cols] views.
enum BinaryOp { BIN_ADD = 0, BIN_MUL_SILU = 1, BIN_MUL_SIGMOID = 2, BIN_SWIGLU = 3 };

struct BinaryArgs {
    const float* a; i64 lda;
    const float* b; i64 ldb;
    float* y; i64 ldy;
    i32 rows, cols, op;
};

extern "C" __global__ void binary_map(BinaryArgs p) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)p.rows * p.cols) return;
    const i64 r = idx / p.cols, c = idx % p.cols;
    const float x = p.a[r * p.lda + c];
    const float z = p.b[r * p.ldb + c];
    float v;
    switch (p.op) {
        case BIN_ADD: v = x + z; break;
        case BIN_MUL_SILU: v = x * tally_silu(z); break;
        case BIN_MUL_SIGMOID: v = x * tally_sigmoid(z); break;
        default: v = tally_silu(x) * z; break;  // BIN_SWIGLU: silu(gate) * up
    }
    p.y[r * p.ldy + c] = v;
}

// ---------------------------------------------------------------------------------------------
// Router: softmax over E experts (f32), top-k (ties to the lower index), weights renormalised.
// One warp per token; E <= 1024, k <= 16.
struct TopkArgs {
    const float* logits; i64 ld;
    i32* ids; i64 ld_ids;
    float* w; i64 ld_w;
    i32 rows, experts, k;
};

extern "C" __global__ void router_topk(TopkArgs a) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= a.rows) return;
    const float* l = a.logits + (i64)warp * a.ld;
    constexpr int PER = 32;  // up to 1024 experts
    float v[PER];
    float mx = -TALLY_INF;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int e = lane + 32 * j;
        v[j] = e < a.experts ? l[e] : -TALLY_INF;
        mx = fmaxf(mx, v[j]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int e = lane + 32 * j;
        v[j] = e < a.experts ? __expf(v[j] - mx) : -1.0f;  // probabilities (unnormalised), -1 = absent
        if (e < a.experts) sum += v[j];
    }
    sum = warp_sum(sum);
    float chosen_sum = 0.0f;
    float chosen_p[16];
    int chosen_e[16];
    for (int t = 0; t < a.k && t < 16; t++) {
        // Arg-max over the warp: highest p, then lowest expert index.
        float bp = -1.0f;
        int be = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int e = lane + 32 * j;
            if (v[j] > bp || (v[j] == bp && e < be)) { bp = v[j]; be = e; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float op = __shfl_xor_sync(0xffffffffu, bp, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (op > bp || (op == bp && oe < be)) { bp = op; be = oe; }
        }
        chosen_p[t] = bp / sum;
        chosen_e[t] = be;
        chosen_sum += bp / sum;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            if (lane + 32 * j == be) v[j] = -2.0f;  // taken
        }
    }
    if (lane == 0) {
        for (int t = 0; t < a.k && t < 16; t++) {
            a.ids[(i64)warp * a.ld_ids + t] = chosen_e[t];
            a.w[(i64)warp * a.ld_w + t] = chosen_p[t] / chosen_sum;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MoE combine: out[t] = sum_j w[t,j] * y[t*k+j]. One thread per (t, column).
struct CombineArgs {
    const float* y; i64 ldy;
    const float* w; i64 ldw;
    float* out; i64 ldo;
    i32 rows, cols, k;
};

extern "C" __global__ void moe_combine(CombineArgs a) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)a.rows * a.cols) return;
    const i64 t = idx / a.cols, c = idx % a.cols;
    float s = 0.0f;
    for (int j = 0; j < a.k; j++) s += a.w[t * a.ldw + j] * a.y[(t * a.k + j) * a.ldy + c];
    a.out[t * a.ldo + c] = s;
}

// ---------------------------------------------------------------------------------------------
// Shared-expert gate: y[t] = s[t] * sigmoid(x[t] . w). One block per row.
struct SharedGateArgs {
    const float* x; i64 ldx;
    const float* s; i64 lds;
    const float* w;
    float* y; i64 ldy;
    i32 rows, cols;
};

extern "C" __global__ void shared_gate(SharedGateArgs a) {
    __shared__ float red[32];
    const int row = blockIdx.x;
    if (row >= a.rows) return;
    const float* x = a.x + (i64)row * a.ldx;
    float d = 0.0f;
    for (int i = threadIdx.x; i < a.cols; i += blockDim.x) d += x[i] * a.w[i];
    d = block_sum(d, red);
    const float g = tally_sigmoid(d);
    for (int i = threadIdx.x; i < a.cols; i += blockDim.x) {
        a.y[(i64)row * a.ldy + i] = a.s[(i64)row * a.lds + i] * g;
    }
}
