// Router top-k: Op::TopK; reference crates/engine/src/cpu/ops/router.rs.
#include "common.cuh"

// Router: softmax over E experts (f32), top-k (ties to the lower index), weights renormalised.
// One warp per token; E <= 1024 (router_topk) or E <= 256 (router_topk8, the same result), k <= 16.
struct TopkArgs {
    const float* logits; i64 ld;
    i32* ids; i64 ld_ids;
    float* w; i64 ld_w;
    i32 rows, experts, k;
};

// PER values per lane: 32 * PER experts at most. One warp does every round alone, so its
// instruction count is the time (ncu on the H200: 9.4 us at PER = 32 for 256 experts, 4.8 cycles
// per issued instruction): router_topk8 (256 experts) scans a quarter of the registers.
template <int PER>
__device__ __forceinline__ void topk_body(const TopkArgs& a) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= a.rows || a.experts > 32 * PER) return;
    const float* l = a.logits + (i64)warp * a.ld;
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
    // Unrolled with a guard (not `t < k` as the bound) so chosen_* index registers: a runtime
    // index put them in local memory (128 bytes of stack).
#pragma unroll
    for (int t = 0; t < 16; t++) {
        if (t >= a.k) break;
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
#pragma unroll
        for (int t = 0; t < 16; t++) {
            if (t >= a.k) break;
            a.ids[(i64)warp * a.ld_ids + t] = chosen_e[t];
            a.w[(i64)warp * a.ld_w + t] = chosen_p[t] / chosen_sum;
        }
    }
}

extern "C" __global__ void router_topk(TopkArgs a) { pdl_enter(); topk_body<32>(a); }
extern "C" __global__ void router_topk8(TopkArgs a) { pdl_enter(); topk_body<8>(a); }
