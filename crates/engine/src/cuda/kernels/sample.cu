// Sampling one token on the device: the specification is crates/engine/src/sample.rs (its module
// docs, steps 1-9); this is the same procedure with a radix select in place of the sort, so only
// the token id leaves the device.
//
// One block of SAMPLE_THREADS threads. Thread t owns the contiguous ids [t*chunk, (t+1)*chunk), so
// walking a thread's chunk, then the next thread's, is walking in id order: the top-k tie rule
// (lowest ids first) and the draw (first survivor in id order whose running weight exceeds r)
// need only a prefix sum over threads. Weights are integers (floor(exp((w-M)/T) * 2^32)), so
// every sum is exact in any order and the result does not depend on atomics' ordering.
//
// Work: a copy pass, a max pass, 4 radix rounds for top-k, 1 for Z_k, 4 for top-p, 1 for the
// draw, each reading the vocabulary once from L2 (1 MB for 248k tokens). A one-block kernel is
// simple and exact; a multi-block version is the next step if the ledger shows it matters.
#include "common.cuh"


struct SampleArgs {
    const float* logits;  // [vocab]
    float* work;          // [vocab]: the penalised logits
    const i32* window;    // [n_window]: the penalty window, oldest first
    i32* out;             // [1]: the chosen id
    i32 vocab;
    i32 n_window;
    i32 top_k;            // 0 or >= vocab: off
    i32 greedy;
    float temperature;
    float top_p;          // >= 1: off
    float rep;            // repetition penalty
    float freq;           // frequency penalty
    float presence;       // presence penalty
    u64 min_weight;       // ceil(min_p * 2^32), 0 = off (computed on the host as in sample.rs)
    u64 random;           // this step's random draw
};

__device__ __forceinline__ u32 sample_key(float x) {
    u32 b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) b = 0xff800000u;  // NaN -> -inf
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ u64 sample_mass(float w, float m, float t) {
    const double e = exp(((double)w - (double)m) / (double)t);
    return (u64)floor(e * 4294967296.0);
}

__device__ __forceinline__ u64 warp_max_u64(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const u64 x = __shfl_xor_sync(0xffffffffu, v, o);
        v = x > v ? x : v;
    }
    return v;
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide max / sum of a u64; every thread gets the result. `s32` holds 32 values.
__device__ u64 block_max_u64(u64 v, u64* s32) {
    v = warp_max_u64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s32[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = (threadIdx.x & 31) < (blockDim.x >> 5) ? s32[threadIdx.x & 31] : 0;
    return warp_max_u64(t);
}

__device__ u64 block_sum_u64(u64 v, u64* s32) {
    v = warp_sum_u64(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s32[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = (threadIdx.x & 31) < (blockDim.x >> 5) ? s32[threadIdx.x & 31] : 0;
    return warp_sum_u64(t);
}

// Exclusive prefix sum over threads in thread order (one value per thread).
__device__ u64 block_exclusive_u64(u64 v, u64* s_all) {
    __syncthreads();
    s_all[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 acc = 0;
        for (int i = 0; i < (int)blockDim.x; ++i) {
            const u64 x = s_all[i];
            s_all[i] = acc;
            acc += x;
        }
    }
    __syncthreads();
    return s_all[threadIdx.x];
}

// The top-k survivors: keys above the cut, and the first `ties` ids whose key equals it.
struct TopK {
    bool on;
    u32 cut;
    u64 ties;
    u64 eq;  // ties at the cut met so far in id order (starts at the earlier threads' count)
    __device__ bool keep(u32 k) {
        if (!on || k > cut) return true;
        if (k == cut) return eq++ < ties;
        return false;
    }
};

// Radix select over the keys of ids [lo, hi) of every thread: the largest cut c such that the
// weight of keys >= c reaches `target`, and the weight still needed at c (target minus the weight
// of keys > c). `Weight` gives an id's weight (0 = not a candidate); it is called in id order once
// per round, after `reset`.
template <class Weight>
__device__ u32 radix_select(int lo, int hi, const float* w, u64 target, Weight& weight, u64* hist,
                            u32* s_prefix, u64* s_rem, u64* rem_out) {
    u32 prefix = 0, mask = 0;
    u64 rem = target;
    for (int d = 3; d >= 0; --d) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        weight.reset();
        for (int i = lo; i < hi; ++i) {
            const u32 k = sample_key(w[i]);
            const u64 x = weight(i, k);
            if (x != 0 && (k & mask) == prefix) atomicAdd(&hist[(k >> (8 * d)) & 255u], x);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u32 pick = 0;
            for (int b = 255; b >= 0; --b) {
                if (hist[b] >= rem) {
                    pick = (u32)b;
                    break;
                }
                rem -= hist[b];
            }
            *s_prefix = prefix | (pick << (8 * d));
            *s_rem = rem;
        }
        __syncthreads();
        prefix = *s_prefix;
        rem = *s_rem;
        mask |= 255u << (8 * d);
    }
    *rem_out = rem;
    return prefix;
}

struct CountAll {
    __device__ void reset() {}
    __device__ u64 operator()(int, u32) { return 1; }
};

struct TopKMass {
    TopK tk;
    u64 eq0;
    const float* w;
    float m, t;
    __device__ void reset() { tk.eq = eq0; }
    __device__ u64 operator()(int i, u32 k) { return tk.keep(k) ? sample_mass(w[i], m, t) : 0; }
};

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_token(SampleArgs a) {
    pdl_enter();
    __shared__ u64 hist[256];
    __shared__ u64 s_all[SAMPLE_THREADS];
    __shared__ u64 s32[32];
    __shared__ u32 s_prefix;
    __shared__ u64 s_rem;
    const int chunk = (a.vocab + (int)blockDim.x - 1) / (int)blockDim.x;
    const int lo = min((int)threadIdx.x * chunk, a.vocab);
    const int hi = min(lo + chunk, a.vocab);
    float* w = a.work;

    // 1. Logits, NaN as -inf.
    for (int i = lo; i < hi; ++i) {
        const float x = a.logits[i];
        w[i] = x != x ? -TALLY_INF : x;
    }
    __syncthreads();
    // 2. Penalties: each distinct token once, by the thread of its earliest window position.
    for (int j = threadIdx.x; j < a.n_window; j += blockDim.x) {
        const i32 t = a.window[j];
        bool first = true;
        int c = 0;
        for (int q = 0; q < a.n_window; ++q) {
            if (a.window[q] == t) {
                if (q < j) first = false;
                ++c;
            }
        }
        if (first && t >= 0 && t < a.vocab) {
            float x = w[t];
            x = x > 0.0f ? __fdiv_rn(x, a.rep) : __fmul_rn(x, a.rep);
            x = __fsub_rn(x, __fmul_rn((float)c, a.freq));
            x = __fsub_rn(x, a.presence);
            w[t] = x;
        }
    }
    __syncthreads();
    // 3. The top token: largest key, lowest id (packed so one max finds both).
    u64 best = 0;
    for (int i = lo; i < hi; ++i) {
        const u64 p = ((u64)sample_key(w[i]) << 32) | (u64)(0xffffffffu - (u32)i);
        best = p > best ? p : best;
    }
    best = block_max_u64(best, s32);
    const i32 top = (i32)(0xffffffffu - (u32)(best & 0xffffffffu));
    if (a.greedy || a.vocab <= 1 || (u32)(best >> 32) == sample_key(-TALLY_INF)) {
        if (threadIdx.x == 0) a.out[0] = top;
        return;
    }
    const float m = w[top];

    // 5. Top-k by count.
    TopK tk{false, 0, 0, 0};
    u64 eq0 = 0;
    if (a.top_k > 0 && a.top_k < a.vocab) {
        CountAll all;
        u64 ties = 0;
        const u32 cut = radix_select(lo, hi, w, (u64)a.top_k, all, hist, &s_prefix, &s_rem, &ties);
        u64 eq_here = 0;
        for (int i = lo; i < hi; ++i) eq_here += sample_key(w[i]) == cut;
        eq0 = block_exclusive_u64(eq_here, s_all);
        tk = TopK{true, cut, ties, eq0};
    }
    TopKMass km{tk, eq0, w, m, a.temperature};

    // 7. Top-p on the top-k survivors' weights.
    bool topp = a.top_p < 1.0f;
    u32 cut_p = 0;
    if (topp) {
        u64 zk = 0;
        km.reset();
        for (int i = lo; i < hi; ++i) zk += km(i, sample_key(w[i]));
        zk = block_sum_u64(zk, s32);
        u64 target = (u64)ceil((double)a.top_p * (double)zk);
        target = target < 1 ? 1 : (target > zk ? zk : target);
        u64 unused = 0;
        cut_p = radix_select(lo, hi, w, target, km, hist, &s_prefix, &s_rem, &unused);
    }

    // 8-9. Survivors' weights in id order, then the draw.
    u64 mine = 0;
    km.reset();
    for (int i = lo; i < hi; ++i) {
        const u32 k = sample_key(w[i]);
        const u64 x = km(i, k);
        if (x >= a.min_weight && (!topp || k >= cut_p)) mine += x;
    }
    const u64 before = block_exclusive_u64(mine, s_all);
    const u64 z = block_sum_u64(mine, s32);
    if (z == 0) {
        if (threadIdx.x == 0) a.out[0] = top;
        return;
    }
    const u64 r = __umul64hi(a.random, z);
    if (r >= before && r < before + mine) {
        u64 acc = before;
        km.reset();
        for (int i = lo; i < hi; ++i) {
            const u32 k = sample_key(w[i]);
            const u64 x = km(i, k);
            if (x >= a.min_weight && (!topp || k >= cut_p) && x != 0) {
                acc += x;
                if (acc > r) {
                    a.out[0] = i;
                    break;
                }
            }
        }
    }
}

// Greedy decoding with no penalty to apply: the top token alone (step 3 above, same key and tie
// rule), over many blocks. Each thread packs (key << 32 | ~id) for a grid-stride slice read
// coalesced, the block takes the max, and one atomicMax per block folds it into `best`, which the
// host zeroes before the launch and decodes after (id = 0xffffffff - low 32 bits). The one-block
// sampler above walks contiguous chunks per thread (uncoalesced) and took 0.37 ms on the H200 for
// 248,320 logits; this reads them once at full width.
struct ArgmaxArgs {
    const float* logits;  // [vocab]
    u64* best;            // [1], zeroed before the launch
    i32 vocab;
    i32 pad0;
};

extern "C" __global__ void __launch_bounds__(256) argmax_token(ArgmaxArgs a) {
    pdl_enter();
    __shared__ u64 s32[32];
    u64 best = 0;
    const int stride = (int)(gridDim.x * blockDim.x);
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < a.vocab; i += stride) {
        const u64 p = ((u64)sample_key(a.logits[i]) << 32) | (u64)(0xffffffffu - (u32)i);
        best = p > best ? p : best;
    }
    best = block_max_u64(best, s32);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned long long*>(a.best), (unsigned long long)best);
}
