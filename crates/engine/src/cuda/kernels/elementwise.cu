// Element-wise ops; reference crates/engine/src/cpu/ops/elementwise.rs: the binary maps (Op::Add,
// Op::MulSilu, Op::MulSigmoid, Op::SwiGlu), the shared-expert gate (Op::SharedGate) and the
// delta-rule gates (Op::DeltaGates; delta_gates: grid ceil(T*H / 256) at most 4096, 256 threads,
// a grid-stride loop).
#include "common.cuh"

// Binary element-wise maps over [rows, cols] views.
enum BinaryOp { BIN_ADD = 0, BIN_MUL_SILU = 1, BIN_MUL_SIGMOID = 2, BIN_SWIGLU = 3 };

struct BinaryArgs {
    const float* a; i64 lda;
    const float* b; i64 ldb;
    float* y; i64 ldy;
    i32 rows, cols, op;
};

extern "C" __global__ void binary_map(BinaryArgs p) {
    pdl_enter();
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

// Shared-expert gate: y[t] = s[t] * sigmoid(x[t] . w). One block per row.
struct SharedGateArgs {
    const float* x; i64 ldx;
    const float* s; i64 lds;
    const float* w;
    float* y; i64 ldy;
    i32 rows, cols;
};

extern "C" __global__ void shared_gate(SharedGateArgs a) {
    pdl_enter();
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

struct DeltaGatesArgs {
    const float* b; i64 ldbin;  // [T, H] beta logits
    const float* a; i64 lda;    // [T, H] alpha
    const float* dt_bias;       // [H]
    const float* ssm_a;         // [H] (= -exp(A_log))
    float* beta; i64 ldbeta;    // [T, H] out: sigmoid(b)
    float* g; i64 ldg;          // [T, H] out: ssm_a * softplus(a + dt_bias)
    i32 T, H;
};

extern "C" __global__ void __launch_bounds__(256) delta_gates(DeltaGatesArgs a) {
    pdl_enter();
    const i64 total = (i64)a.T * a.H;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 t = e / a.H;
        const int j = (int)(e - t * a.H);
        const float bv = a.b[t * a.ldbin + j];
        const float av = a.a[t * a.lda + j];
        a.beta[t * a.ldbeta + j] = 1.0f / (1.0f + expf(-bv));
        a.g[t * a.ldg + j] = a.ssm_a[j] * gates_softplus(av + a.dt_bias[j]);
    }
}
