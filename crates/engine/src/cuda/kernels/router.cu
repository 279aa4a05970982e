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
// dependent chain is the time (ncu on the H200: 9.4 us at PER = 32 for 256 experts, 4.8 cycles
// per issued instruction, with a shuffle arg-max per round): router_topk8 (256 experts) scans a
// quarter of the registers, and a round is two warp reductions (below).
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
    // Each probability as an ordered key: |p|'s bits + 1 (the bits of a non-negative float order
    // as the float), 0 for an absent or taken expert (and NaN, which the comparison below never
    // picks either). A round is then the lane's best key (the first of equal ones: its lowest
    // expert), one __reduce_max_sync over the warp and one __reduce_min_sync of the expert among
    // the lanes holding that key: the highest p, ties to the lower index, as the pairwise
    // (p, index) arg-max it replaces, whose 5 dependent pairs of shuffles per round made the
    // kernel's time.
    u32 key[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) key[j] = v[j] >= 0.0f ? __float_as_uint(fabsf(v[j])) + 1u : 0u;
    // Unrolled with a guard (not `t < k` as the bound) so chosen_* index registers: a runtime
    // index put them in local memory (128 bytes of stack).
#pragma unroll
    for (int t = 0; t < 16; t++) {
        if (t >= a.k) break;
        u32 bk = 0u;
        int be = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            if (key[j] > bk) { bk = key[j]; be = lane + 32 * j; }
        }
        const u32 mk = __reduce_max_sync(0xffffffffu, bk);
        be = __reduce_min_sync(0xffffffffu, static_cast<u32>(mk != 0u && bk == mk ? be : 0x7fffffff));
        const float bp = mk != 0u ? __uint_as_float(mk - 1u) : -1.0f;
        chosen_p[t] = bp / sum;
        chosen_e[t] = be;
        chosen_sum += bp / sum;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            if (lane + 32 * j == be) key[j] = 0u;  // taken
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
