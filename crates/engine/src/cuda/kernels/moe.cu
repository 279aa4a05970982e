// Routed experts; reference crates/engine/src/cpu/ops/moe.rs (the expert GEMMs themselves are
// gemm.cu's, shared with the dense projections): moe_route, then moe_combine.
//
// moe_route: the MoE routing tables for the grouped GEMM in gemm.cu: from the top-k expert ids [T, k] of every
// token, the number of pairs per expert, the pair list grouped by expert, and the tiles of at
// most `bm` rows the GEMM's blocks take.
//
// Blocks of MOE_ROUTE_THREADS (1024) threads; static shared memory only. Pair p = t*k + j
// (row-major ids); block b owns pairs [b chunk, (b + 1) chunk), blocks = ceil(P / chunk) (one
// block when chunk >= P). With more than one block, moe_route_count runs first over the same
// grid and writes every block's counts per expert (and of invalid ids) to bcount[b][E + 1].
// Results:
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
// outside 1..MOE_ROUTE_MAX_E, bm < 1, more than MOE_ROUTE_MAX_PAIRS pairs, chunk < 1, more than
// one block without bcount, another block size) leave every tile unused and report all pairs in
// err[0].
//
// Method: warp w of block b owns a contiguous part of the block's pairs. Pass 1 counts, per warp
// and expert, with __match_any_sync over 32 pairs at a time; an exclusive prefix over the
// experts (of all blocks' counts), over the earlier blocks (bcount) and over the block's warps
// (in pair order) gives every (block, warp, expert) its first slot; pass 2 walks the pairs again
// and writes each pair at its slot + its rank among equal ids of lower lanes, which keeps the
// pair order. Block 0 writes counts, tiles and err.
#include "common.cuh"

#define MOE_ROUTE_MAX_PAIRS (1 << 24)

struct MoeRouteArgs {
    const i32* ids;      // [n_tokens, k] expert ids
    i32 n_tokens;
    i32 k;
    i32 n_expert;        // E, 1..MOE_ROUTE_MAX_E
    i32 bm;              // rows per tile (the GEMM variant's BM)
    i32 max_tiles;       // length of the tile tables (the MoE GEMM's grid.y)
    i32 chunk;           // pairs per block
    i32* counts;         // [n_expert]
    i32* sorted_rows;    // [n_tokens * k]
    i32* tile_expert;    // [max_tiles]
    i32* tile_start;     // [max_tiles]
    i32* tile_rows;      // [max_tiles]
    i32* err;            // [2]
    i32* bcount;         // [blocks][n_expert + 1], null with one block
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

// Whether the routing arguments are in range (see above), and the pair count.
__device__ __forceinline__ bool route_args_ok(const MoeRouteArgs& a, i64& P64) {
    P64 = static_cast<i64>(a.n_tokens) * a.k;
    const int E = a.n_expert;
    const bool one = a.chunk >= 1 && P64 <= a.chunk;
    return a.n_tokens >= 0 && a.k >= 0 && P64 <= MOE_ROUTE_MAX_PAIRS && E >= 1 && E <= MOE_ROUTE_MAX_E &&
           a.bm >= 1 && a.chunk >= 1 && (one || a.bcount) && blockDim.x == MOE_ROUTE_THREADS &&
           blockDim.y == 1 && blockDim.z == 1;
}

// Pass 1 of block blockIdx.x: per-warp counts of its part of the block's pairs into my[e] (this
// warp's row of the shared table, zeroed), invalid ids into *s_bad. p_begin / p_end: the warp's
// part.
__device__ __forceinline__ void route_count_pass(const MoeRouteArgs& a, int P, int& p_begin, int& p_end, i32* tab,
                                                 int* s_bad) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5, E = a.n_expert;
    const int b0 = min(P, static_cast<int>(blockIdx.x) * a.chunk), b1 = min(P, b0 + a.chunk);
    const int wchunk = (b1 - b0 + nw - 1) / nw;
    p_begin = min(b1, b0 + warp * wchunk);
    p_end = min(b1, p_begin + wchunk);
    i32* my = tab + warp * E;
    const u32 lt = (1u << lane) - 1u;
    int bad = 0;
    for (int p0 = p_begin; p0 < p_end; p0 += 32) {
        const int p = p0 + lane;
        int key = -2;  // -2: past the part; -1: invalid id
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
    if (bad) atomicAdd(s_bad, bad);
}

// Every block's counts per expert and of invalid ids, to bcount[blockIdx.x] (moe_route's first
// launch when it takes more than one block; the same grid and arguments).
extern "C" __global__ void __launch_bounds__(MOE_ROUTE_THREADS) moe_route_count(MoeRouteArgs a) {
    pdl_enter();
    __shared__ i32 tab[32 * MOE_ROUTE_MAX_E];
    __shared__ int s_bad;
    i64 P64;
    if (!route_args_ok(a, P64) || !a.bcount) return;  // moe_route reports it
    const int tid = threadIdx.x, nthr = blockDim.x, nw = nthr >> 5, E = a.n_expert;
    for (int i = tid; i < nw * E; i += nthr) tab[i] = 0;
    if (tid == 0) s_bad = 0;
    __syncthreads();
    int p_begin, p_end;
    route_count_pass(a, static_cast<int>(P64), p_begin, p_end, tab, &s_bad);
    __syncthreads();
    i32* out = a.bcount + static_cast<i64>(blockIdx.x) * (E + 1);
    for (int e = tid; e < E; e += nthr) {
        int c = 0;
        for (int w = 0; w < nw; w++) c += tab[w * E + e];
        out[e] = c;
    }
    if (tid == 0) out[E] = s_bad;
}

extern "C" __global__ void __launch_bounds__(MOE_ROUTE_THREADS) moe_route(MoeRouteArgs a) {
    pdl_enter();
    __shared__ i32 tab[32 * MOE_ROUTE_MAX_E];  // [warp][expert] count, then first slot
    __shared__ i32 cnt[MOE_ROUTE_MAX_E], off[MOE_ROUTE_MAX_E], toff[MOE_ROUTE_MAX_E], base[MOE_ROUTE_MAX_E];
    __shared__ i32 tmp[32];
    __shared__ i32 s_bad, s_uncovered;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthr = blockDim.x;
    const bool lead = blockIdx.x == 0;
    i64 P64;
    const int E = a.n_expert, bm = a.bm;
    if (!route_args_ok(a, P64)) {
        if (!lead) return;
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
    const int nblocks = (P + a.chunk - 1) / a.chunk;

    for (int i = tid; i < nw * E; i += nthr) tab[i] = 0;
    if (tid == 0) {
        s_bad = 0;
        s_uncovered = 0;
    }
    __syncthreads();

    int p_begin, p_end;
    route_count_pass(a, P, p_begin, p_end, tab, &s_bad);
    i32* my = tab + warp * E;
    const u32 lt = (1u << lane) - 1u;
    __syncthreads();

    // Per expert: prefix over the warps (pair order); the block's count, the earlier blocks'
    // (base) and every block's (cnt).
    for (int e = tid; e < E; e += nthr) {
        int run = 0;
        for (int w = 0; w < nw; w++) {
            const int c = tab[w * E + e];
            tab[w * E + e] = run;
            run += c;
        }
        int before = 0, all = run;
        if (nblocks > 1) {
            all = 0;
            for (int b = 0; b < nblocks; b++) {
                const int c = a.bcount[static_cast<i64>(b) * (E + 1) + e];
                if (b < static_cast<int>(blockIdx.x)) before += c;
                all += c;
            }
        }
        base[e] = before;
        cnt[e] = all;
    }
    if (nblocks > 1 && tid == 0) {
        int bad = 0;
        for (int b = 0; b < nblocks; b++) bad += a.bcount[static_cast<i64>(b) * (E + 1) + E];
        s_bad = bad;
    }
    __syncthreads();

    // Prefix over the experts of the counts and of the tile counts (E <= blockDim).
    const int c = tid < E ? cnt[tid] : 0;
    int n_valid, n_tiles;
    const int c_ex = route_block_scan(c, tmp, n_valid);
    const int t_ex = route_block_scan((c + bm - 1) / bm, tmp, n_tiles);
    if (tid < E) {
        off[tid] = c_ex + base[tid];
        toff[tid] = t_ex;
        if (lead) a.counts[tid] = c;
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
    if (!lead) return;
    for (int p = n_valid + tid; p < P; p += nthr) a.sorted_rows[p] = -1;

    // Tiles: tile t belongs to the last expert e with toff[e] <= t (off[e] is the expert's first
    // slot: base is 0 in block 0).
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
