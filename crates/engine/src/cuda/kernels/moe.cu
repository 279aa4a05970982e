// Routed experts; reference crates/engine/src/cpu/ops/moe.rs (the expert GEMMs themselves are
// gemm.cu's, shared with the dense projections): moe_route, then moe_combine.
//
// moe_route: the MoE routing tables for the grouped GEMM in gemm.cu: from the top-k expert ids [T, k] of every
// token, the number of pairs per expert, the pair list grouped by expert, and the tiles of at
// most `bm` rows the GEMM's blocks take.
//
// One block of MOE_ROUTE_THREADS (1024) threads; grid (1, 1, 1); static shared memory only.
// Pair p = t*k + j (row-major ids). Results:
//   counts[e]         pairs routed to expert e
//   sorted_rows[i]    pair ids grouped by expert in increasing expert order; within an expert in
//                     increasing pair order (stable); entries past the valid pairs are -1
//   tile_expert[t]    for t < max_tiles: expert of tile t (tiles in expert order, ceil(counts/bm)
//                     per expert), or -1 once the tiles run out
//   tile_start[t]     first index into sorted_rows (0 for unused tiles)
//   tile_rows[t]      rows in the tile, 1..bm (0 for unused tiles)
//   err[0]            ids outside [0, n_expert) (those pairs are left out of every table)
//   err[1]            valid pairs that got no tile because max_tiles was too small
// max_tiles = ceil(T*k / bm) + n_expert always suffices. Out-of-range arguments (n_expert
// outside 1..MOE_ROUTE_MAX_E, bm < 1, more than MOE_ROUTE_MAX_PAIRS pairs, another block size)
// leave every tile unused and report all pairs in err[0].
//
// Method: warp w owns a contiguous chunk of pairs. Pass 1 counts, per warp and expert, with
// __match_any_sync over 32 pairs at a time; an exclusive prefix over the warps (in chunk order)
// and over the experts gives every (warp, expert) its first slot; pass 2 walks the chunks again
// and writes each pair at its slot + its rank among equal ids of lower lanes, which keeps the
// pair order.
#include "common.cuh"

#define MOE_ROUTE_MAX_PAIRS (1 << 24)

struct MoeRouteArgs {
    const i32* ids;      // [n_tokens, k] expert ids
    i32 n_tokens;
    i32 k;
    i32 n_expert;        // E, 1..MOE_ROUTE_MAX_E
    i32 bm;              // rows per tile (the GEMM variant's BM)
    i32 max_tiles;       // length of the tile tables (the MoE GEMM's grid.y)
    i32* counts;         // [n_expert]
    i32* sorted_rows;    // [n_tokens * k]
    i32* tile_expert;    // [max_tiles]
    i32* tile_start;     // [max_tiles]
    i32* tile_rows;      // [max_tiles]
    i32* err;            // [2]
};

// Exclusive prefix sum over the block (one value per thread; blockDim a multiple of 32, at
// most 1024); `total` gets the sum of all values. tmp: 32 ints of shared memory.
__device__ __forceinline__ int route_block_scan(int v, int* tmp, int& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();  // tmp may still be read by a previous call
    if (lane == 31) tmp[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int t = lane < nw ? tmp[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        tmp[lane] = t;
    }
    __syncthreads();
    total = tmp[nw - 1];
    return (warp ? tmp[warp - 1] : 0) + x - v;
}

extern "C" __global__ void __launch_bounds__(MOE_ROUTE_THREADS) moe_route(MoeRouteArgs a) {
    pdl_enter();
    __shared__ i32 tab[32 * MOE_ROUTE_MAX_E];  // [warp][expert] count, then first slot
    __shared__ i32 cnt[MOE_ROUTE_MAX_E], off[MOE_ROUTE_MAX_E], toff[MOE_ROUTE_MAX_E];
    __shared__ i32 tmp[32];
    __shared__ i32 s_bad, s_uncovered;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthr = blockDim.x;
    const i64 P64 = static_cast<i64>(a.n_tokens) * a.k;
    const int E = a.n_expert, bm = a.bm;
    const bool ok = a.n_tokens >= 0 && a.k >= 0 && P64 <= MOE_ROUTE_MAX_PAIRS && E >= 1 &&
                    E <= MOE_ROUTE_MAX_E && bm >= 1 && nthr == MOE_ROUTE_THREADS && blockDim.y == 1 &&
                    blockDim.z == 1;
    if (!ok) {
        for (int t = tid; t < a.max_tiles; t += nthr) {
            a.tile_expert[t] = -1;
            a.tile_start[t] = 0;
            a.tile_rows[t] = 0;
        }
        const i64 P = P64 < 0 ? 0 : min(P64, static_cast<i64>(MOE_ROUTE_MAX_PAIRS));
        for (i64 p = tid; p < P; p += nthr) a.sorted_rows[p] = -1;
        for (int e = tid; e < min(max(E, 0), MOE_ROUTE_MAX_E); e += nthr) a.counts[e] = 0;
        if (tid == 0) {
            a.err[0] = static_cast<i32>(P);
            a.err[1] = 0;
        }
        return;
    }
    const int P = static_cast<int>(P64);
    const int nw = nthr >> 5;

    for (int i = tid; i < nw * E; i += nthr) tab[i] = 0;
    if (tid == 0) {
        s_bad = 0;
        s_uncovered = 0;
    }
    __syncthreads();

    const int chunk = (P + nw - 1) / nw;
    const int p_begin = min(P, warp * chunk), p_end = min(P, p_begin + chunk);
    i32* my = tab + warp * E;
    const u32 lt = (1u << lane) - 1u;

    // Pass 1: per-warp counts.
    int bad = 0;
    for (int p0 = p_begin; p0 < p_end; p0 += 32) {
        const int p = p0 + lane;
        int key = -2;  // -2: past the chunk; -1: invalid id
        if (p < p_end) {
            const int e = a.ids[p];
            key = (e >= 0 && e < E) ? e : -1;
        }
        const u32 peers = __match_any_sync(0xffffffffu, key);
        if ((peers & lt) == 0) {  // the lowest lane of each group of equal keys
            if (key >= 0) my[key] += __popc(peers);
            else if (key == -1) bad += __popc(peers);
        }
        __syncwarp();
    }
    if (bad) atomicAdd(&s_bad, bad);
    __syncthreads();

    // Per expert: prefix over the warps (chunk order), total count.
    for (int e = tid; e < E; e += nthr) {
        int run = 0;
        for (int w = 0; w < nw; w++) {
            const int c = tab[w * E + e];
            tab[w * E + e] = run;
            run += c;
        }
        cnt[e] = run;
    }
    __syncthreads();

    // Prefix over the experts of the counts and of the tile counts (E <= blockDim).
    const int c = tid < E ? cnt[tid] : 0;
    int n_valid, n_tiles;
    const int c_ex = route_block_scan(c, tmp, n_valid);
    const int t_ex = route_block_scan((c + bm - 1) / bm, tmp, n_tiles);
    if (tid < E) {
        off[tid] = c_ex;
        toff[tid] = t_ex;
        a.counts[tid] = c;
    }
    __syncthreads();

    // Pass 2: placement.
    for (int p0 = p_begin; p0 < p_end; p0 += 32) {
        const int p = p0 + lane;
        int key = -2;
        if (p < p_end) {
            const int e = a.ids[p];
            key = (e >= 0 && e < E) ? e : -1;
        }
        const u32 peers = __match_any_sync(0xffffffffu, key);
        if (key >= 0) a.sorted_rows[off[key] + my[key] + __popc(peers & lt)] = p;
        __syncwarp();
        if (key >= 0 && (peers & lt) == 0) my[key] += __popc(peers);
        __syncwarp();
    }
    for (int p = n_valid + tid; p < P; p += nthr) a.sorted_rows[p] = -1;

    // Tiles: tile t belongs to the last expert e with toff[e] <= t.
    int uncovered = 0;
    const int t_hi = max(a.max_tiles, n_tiles);
    for (int t = tid; t < t_hi; t += nthr) {
        if (t < n_tiles) {
            int lo = 0, hi = E - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (toff[mid] <= t) lo = mid;
                else hi = mid - 1;
            }
            const int i = t - toff[lo];
            const int rows = min(bm, cnt[lo] - i * bm);
            if (t < a.max_tiles) {
                a.tile_expert[t] = lo;
                a.tile_start[t] = off[lo] + i * bm;
                a.tile_rows[t] = rows;
            } else {
                uncovered += rows;
            }
        } else {
            a.tile_expert[t] = -1;
            a.tile_start[t] = 0;
            a.tile_rows[t] = 0;
        }
    }
    if (uncovered) atomicAdd(&s_uncovered, uncovered);
    __syncthreads();
    if (tid == 0) {
        a.err[0] = s_bad;
        a.err[1] = s_uncovered;
    }
}

// MoE combine: out[t] = sum_j w[t,j] * y[t*k+j]. One thread per (t, column).
struct CombineArgs {
    const float* y; i64 ldy;
    const float* w; i64 ldw;
    float* out; i64 ldo;
    i32 rows, cols, k;
};

extern "C" __global__ void moe_combine(CombineArgs a) {
    pdl_enter();
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)a.rows * a.cols) return;
    const i64 t = idx / a.cols, c = idx % a.cols;
    float s = 0.0f;
    for (int j = 0; j < a.k; j++) s += a.w[t * a.ldw + j] * a.y[(t * a.k + j) * a.ldy + c];
    a.out[t * a.ldo + c] = s;
}
