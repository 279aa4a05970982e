// NeoX RoPE: Op::Rope; reference crates/engine/src/cpu/ops/rope.rs.
#include "common.cuh"

// NeoX RoPE on the first `dims` columns of every head; row r is at position offset + *pos + r (pos the
// batch position, device data: one captured graph serves every position).
// One thread per (row, head, column of the head). Columns >= dims are copied. Thread i < dims/2
// rotates the pair (i, i + dims/2) and writes both; threads dims/2 <= c < dims have nothing to do.
// So no thread reads an element another thread writes: in place (x == y, as the plan's q RoPE
// node runs) is race-free.
struct RopeArgs {
    const float* x; i64 ldx;
    float* y; i64 ldy;
    i32 rows, n_heads, head_dim, dims, offset;
    float theta;
    const i32* pos;            // the batch position (n_past); null: 0
};

extern "C" __global__ void rope_neox(RopeArgs a) {
    pdl_enter();
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
    const int p0 = a.offset + (a.pos ? *a.pos : 0);
    const float ang = (float)(p0 + r) * inv_freq;
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float x0 = xr[i], x1 = xr[i + half];  // both read before either is written
    yr[i] = x0 * cs - x1 * sn;
    yr[i + half] = x1 * cs + x0 * sn;
}
