// KV cache store: Op::KvStore; reference crates/engine/src/cpu/ops/kv_store.rs.
#include "common.cuh"

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
    pdl_enter();
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
