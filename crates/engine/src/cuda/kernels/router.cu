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
__device__ __forceinline__ void topk_body(const TopkArgs& a, const int warp) {
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

// Row (warp) of a router_topk / router_topk8 thread.
__device__ __forceinline__ int topk_row() { return static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5); }
extern "C" __global__ void router_topk(TopkArgs a) { pdl_enter(); topk_body<32>(a, topk_row()); }
extern "C" __global__ void router_topk8(TopkArgs a) { pdl_enter(); topk_body<8>(a, topk_row()); }

// ---------------------------------------------------------------------------------------------
// router_fused: the router of one token (decode) in one launch: logits = W x (f32 weights
// [E][K], row stride ldw floats) and router_topk8's softmax and top-k of them. Grid
// (ceil(E / ROUTER_ROWS), M): block (b, m) owns rows ROUTER_ROWS b .. + ROUTER_ROWS of token m's
// logits (x row m at x + m ldx, logits at logits + m ldl, ids and weights at + m ldt, counter
// m): a verification batch's M tokens each get exactly a one-token launch's bits.
// Each thread takes the 16-byte pieces f = tid + 256 i of every row of its block (K % 4 == 0;
// x, w and the row stride 16-byte aligned, else nothing is written),
// all loads issued before the products, so a block's 4 rows arrive in about one memory round
// trip (the gemv_f32 it replaces walked 2 rows a warp, 16 dependent pieces a lane: 3% occupancy,
// 6 us a layer under ncu, and router_topk8 was a second launch of 4 us). A row's sum: each
// thread's pieces in order (fmaf over x, y, z, w), warp_sum over the lanes, then the 8 warps' sums
// in warp order. The logits are stored; the block that finishes last (a counter, which it sets
// back to 0 for the next launch) reads them all and runs router_topk8's body on them: the same
// ids and weights as router_topk8 on these logits, bit for bit.
#define ROUTER_ROWS 4
#define ROUTER_THREADS 256
struct RouterArgs {
    const float* x;      // [M][ldx]
    const float* w;      // [E][ldw]
    i64 ldw;
    float* logits;       // [M][ldl]
    i32* ids;            // [M][ldt]
    float* wts;          // [M][ldt]
    u32* counter;        // [M]: 0 before the launch; 0 again after it
    i32 experts, K, k;   // k <= 16 (0: the logits only, any number of rows; else experts <= 256),
                         // K % 4 == 0 (else nothing written)
    i32 ldt;
    i64 ldx, ldl;        // ldx % 4 == 0 (else nothing written)
};

// ROWS: grid.y token rows (router_fused_rows); else one (router_fused, whose code stays as before
// stop 54's rows: row 0 at a.x, a.logits, a.ids, a.wts, a.counter).
template <bool ROWS>
__device__ __forceinline__ void router_body(const RouterArgs& a) {
    if (a.experts < 1 || (a.k > 0 && a.experts > 256) || a.k < 0 || a.k > 16 || a.K < 4 || (a.K & 3) != 0 || (a.ldw & 3) != 0 ||
        (ROWS && (a.ldx & 3) != 0) || ((reinterpret_cast<u64>(a.x) | reinterpret_cast<u64>(a.w)) & 15u) != 0)
        return;
    const i64 m = ROWS ? static_cast<i64>(blockIdx.y) : 0;
    const float* x = a.x + m * a.ldx;
    float* logits = a.logits + m * a.ldl;
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int r0 = static_cast<int>(blockIdx.x) * ROUTER_ROWS;
    const int pieces = a.K >> 2;
    __shared__ float part[ROUTER_THREADS / 32][ROUTER_ROWS];
    __shared__ float lg[256];
    __shared__ int last;
    float acc[ROUTER_ROWS];
#pragma unroll
    for (int r = 0; r < ROUTER_ROWS; r++) acc[r] = 0.0f;
    // Four pieces of every row in flight at a time (K = 2048: two a row, so all eight at once).
    for (int f0 = tid; f0 < pieces; f0 += 4 * ROUTER_THREADS) {
        float4 wv[4][ROUTER_ROWS], xv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int f = f0 + i * ROUTER_THREADS;
            xv[i] = f < pieces ? reinterpret_cast<const float4*>(x)[f] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int r = 0; r < ROUTER_ROWS; r++) {
                const bool on = f < pieces && r0 + r < a.experts;
                wv[i][r] = on ? reinterpret_cast<const float4*>(a.w + static_cast<i64>(r0 + r) * a.ldw)[f]
                              : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (f0 + i * ROUTER_THREADS >= pieces) break;
#pragma unroll
            for (int r = 0; r < ROUTER_ROWS; r++) {
                acc[r] = fmaf(wv[i][r].x, xv[i].x, acc[r]);
                acc[r] = fmaf(wv[i][r].y, xv[i].y, acc[r]);
                acc[r] = fmaf(wv[i][r].z, xv[i].z, acc[r]);
                acc[r] = fmaf(wv[i][r].w, xv[i].w, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROUTER_ROWS; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0) part[warp][r] = s;
    }
    __syncthreads();
    if (tid < ROUTER_ROWS && r0 + tid < a.experts) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < ROUTER_THREADS / 32; w++) s += part[w][tid];
        logits[r0 + tid] = s;
        __threadfence();  // the logit is visible device-wide before this block is counted
    }
    if (a.k == 0) return;  // the GEMV alone (the router node of an unfused run: the same logits)
    __syncthreads();
    if (tid == 0) last = atomicAdd(a.counter + m, 1u) == gridDim.x - 1u;
    __syncthreads();
    if (!last) return;
    // Every other block stored its logits and fenced before it counted itself.
    __threadfence();
    for (int e = tid; e < a.experts; e += ROUTER_THREADS) lg[e] = __ldcg(logits + e);
    if (tid == 0) a.counter[m] = 0u;
    __syncthreads();
    if (warp == 0) {
        const TopkArgs t{lg, 0, a.ids + m * a.ldt, 0, a.wts + m * a.ldt, 0, 1, a.experts, a.k};
        topk_body<8>(t, 0);
    }
}

extern "C" __global__ void __launch_bounds__(ROUTER_THREADS) router_fused(RouterArgs a) {
    pdl_enter();
    router_body<false>(a);
}

// router_fused_rows: grid.y token rows (a verification batch, a short prompt), each row's blocks
// exactly router_fused's on that row.
extern "C" __global__ void __launch_bounds__(ROUTER_THREADS) router_fused_rows(RouterArgs a) {
    pdl_enter();
    router_body<true>(a);
}
