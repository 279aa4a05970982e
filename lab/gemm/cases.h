// Test cases of the GEMM lab, shared by bench.cu (on the GPU) and emu/emu_test.cpp (on the CPU
// emulator). Include after gemm.cu / moe.cu (for GemmArgs, MoeRouteArgs, the kernels).
//
// A backend B provides: template<class T> T* upload(const std::vector<T>&); template<class T>
// T* alloc(size_t n); void poison(float* p, size_t n) (NaN); template<class T> std::vector<T>
// download(const T* p, size_t n); void gemm(GemmFn, unsigned gx, unsigned gy, int threads,
// size_t smem, const GemmArgs&); void route(const MoeRouteArgs&); void dequant(const
// DequantRowsArgs&, unsigned gx, unsigned gy); void release() (frees what was allocated since
// the last release).
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "host_ref.h"

typedef void (*GemmFn)(GemmArgs);

// Kernel variants: the three tensor-core tile heights and the GEMV (every type: the correctness
// matrix runs these N_VARIANTS), then the f32 SIMT GEMMs (F32 weights, dense only: simt_cases).
// V_S16 / V_S32: the swapped tiles (gemm_<t>_s16 / _s32: weights on the MMA's A side).
// V_W32 / V_W64 / V_W128: the swapped tile on wgmma (gemm_<t>_w32 / _w64 / _w128, gemm_wg.cuh;
// w128 with the pipelined schedule where the type has 4 stages).
// V_GEMVR: the persistent multi-row GEMV (gemvr_<t> at M = 1, gemvr4_<t> up to 4 rows; dense,
// integer formats; grid gemvr_blocks, every x row in one block).
enum { V_M128 = 0, V_M64 = 1, V_M32 = 2, V_GEMV = 3, V_MMV = 4, N_VARIANTS = 5, V_SIMT = 5, V_SIMT_M32 = 6, V_GEMV4 = 7,
       V_S16 = 8, V_S32 = 9, V_W32 = 10, V_W64 = 11, V_W128 = 12, V_GEMVR = 13, V_GEMVR4 = 14, V_X64 = 15, V_X128 = 16, V_X96 = 17, V_X32G = 18,
       V_TF32 = 19, V_TF32_M32 = 20, V_X32 = 21, V_XS128 = 22, V_GEMVT = 23, V_GEMVT2 = 24, V_GEMVT4 = 25,
       V_GEMVI = 26, V_MMVI = 27 };
inline const char* variant_name(int v) {
    static const char* n[] = {"m128", "m64", "m32", "gemv", "mmv", "simt", "simt32", "gemv4", "s16", "s32", "w32", "w64", "w128",
                              "gemvr", "gemvr4", "x64", "x128", "x96", "x32g", "tf32", "tf32m32", "x32", "xs128", "gemvt", "gemvt2", "gemvt4",
                              "gemvi", "mmvi"};
    return n[v];
}
inline bool variant_swap(int v) { return v == V_S16 || v == V_S32; }
// V_X64 / V_X96 / V_X128: the x-resident wgmma tile for K <= WGX_K_MAX (gemm_<t>_x64 / _x96 /
// _x128, engine kernels; grid.x ceil(N / 128 / 8): strided walks of 8 weight blocks). V_X32:
// the same with 32 rows and WGX32_STAGES ring stages (gemm_<t>_x32, the engine's downs of short
// prompts since 2026-12-06; walks of 4). V_X32G (lab only): 32 rows and K up to 2048, one block
// walking every weight block. V_XS128: x128 with its warps specialised (gemm_<t>_xs128, 512
// threads).
inline bool variant_wgx(int v) {
    return v == V_X64 || v == V_X96 || v == V_X128 || v == V_X32G || v == V_X32 || v == V_XS128;
}
// Most K of an x-resident variant.
inline int variant_kmax(int v) { return v == V_X32G ? 2048 : WGX_K_MAX; }
inline bool variant_wg(int v) { return v == V_W32 || v == V_W64 || v == V_W128 || variant_wgx(v); }
// V_TF32 / V_TF32_M32: gemm_f32_tf32 / _m32, gemm_f32_simt's / _simt_m32's tiles with 3xTF32
// tensor-core products (F32 weights).
inline bool variant_simt(int v) { return v == V_SIMT || v == V_SIMT_M32 || v == V_TF32 || v == V_TF32_M32; }
// Tile rows the MoE routing is built for (gemv accepts any; 8 keeps decode tiles small); for the
// SIMT kernels, the dense block tile's rows (= its columns).
inline int variant_bm(int v) {
    return v == V_X32G || v == V_X32 ? 32 : v == V_X96 ? 96 : v == V_M128 || v == V_W128 || v == V_X128 || v == V_XS128 ? 128 : v == V_M64 || v == V_W64 || v == V_X64 ? 64 : v == V_M32 || v == V_S32 || v == V_W32 ? 32
           : v == V_S16 ? 16 : v == V_SIMT || v == V_TF32 ? SIMT_BM
           : v == V_SIMT_M32 || v == V_TF32_M32 ? SIMT_M32_BM : 8;
}
inline size_t variant_smem(int type, int v) {
    if (variant_swap(v)) return size_t(SWP_SMEM_BYTES(type, variant_bm(v)));
    if (v == V_X32) return size_t(WGX32_SMEM_BYTES(type));
    if (v == V_XS128) return size_t(WSX_SMEM_BYTES(type));
    if (variant_wgx(v)) return size_t(WGX_SMEM_BYTES_K(type, variant_bm(v), variant_kmax(v)));
    if (variant_wg(v)) return size_t(WG_SMEM_BYTES(type, variant_bm(v)));
    return v == V_GEMV || v == V_GEMV4 || v == V_MMV || v == V_GEMVI || v == V_MMVI || variant_simt(v)
               ? 0
               : size_t(GEMM_SMEM_BYTES(type, variant_bm(v)));
}
#define LAB_KERNELS(name)                                                                      \
    switch (v) {                                                                               \
        case V_M128: return gemm_##name;                                                       \
        case V_M64: return gemm_##name##_m64;                                                  \
        case V_M32: return gemm_##name##_m32;                                                  \
        case V_MMV: return mmv_##name;                                                         \
        case V_GEMV4: return gemv4_##name;                                                     \
        case V_GEMVR: return gemvr_##name;                                                     \
        case V_GEMVR4: return gemvr4_##name;                                                   \
        case V_GEMVT: return gemvt_##name;                                                     \
        case V_GEMVT2: return gemvt2_##name;                                                   \
        case V_GEMVT4: return gemvt4_##name;                                                   \
        case V_GEMVI: return gemvi_##name;                                                     \
        case V_MMVI: return mmvi_##name;                                                       \
        case V_S16: return gemm_##name##_s16;                                                  \
        case V_S32: return gemm_##name##_s32;                                                  \
        case V_W32: return gemm_##name##_w32;                                                  \
        case V_W64: return gemm_##name##_w64;                                                  \
        case V_W128: return gemm_##name##_w128;                                                \
        case V_X64: return gemm_##name##_x64;                                                  \
        case V_X128: return gemm_##name##_x128;                                                \
        case V_X96: return gemm_##name##_x96;                                                  \
        case V_X32G: return gemm_##name##_x32g;                                                \
        case V_X32: return gemm_##name##_x32;                                                  \
        case V_XS128: return gemm_##name##_xs128;                                              \
        default: return gemv_##name;                                                           \
    }
inline GemmFn gemm_fn(int type, int v) {
    if (v == V_SIMT) return gemm_f32_simt;
    if (v == V_SIMT_M32) return gemm_f32_simt_m32;
    if (v == V_TF32) return gemm_f32_tf32;
    if (v == V_TF32_M32) return gemm_f32_tf32_m32;
    switch (type) {
        case ref::Q4_K: LAB_KERNELS(q4_k)
        case ref::Q5_K: LAB_KERNELS(q5_k)
        case ref::Q6_K: LAB_KERNELS(q6_k)
        case ref::Q8_0: LAB_KERNELS(q8_0)
        case ref::BF16: LAB_KERNELS(bf16)
        case ref::F16: LAB_KERNELS(f16)
        case ref::Q4_0: LAB_KERNELS(q4_0)
        case ref::Q4_1: LAB_KERNELS(q4_1)
        case ref::Q5_0: LAB_KERNELS(q5_0)
        case ref::Q5_1: LAB_KERNELS(q5_1)
        case ref::IQ4_NL: LAB_KERNELS(iq4_nl)
        case ref::IQ4_XS: LAB_KERNELS(iq4_xs)
        case ref::MXFP4: LAB_KERNELS(mxfp4)
        case ref::Q2_K: LAB_KERNELS(q2_k)
        case ref::Q3_K: LAB_KERNELS(q3_k)
        default: LAB_KERNELS(f32)
    }
}
#undef LAB_KERNELS

// The gated gate/up tiles (gemm_<t>_g32 / _g128, gemm_wg.cuh): a MoE gate, up and SwiGlu in one
// launch (the engine's ops/fused.rs expert_gated).
#define GATED_FN(name) return bt == 32 ? gemm_##name##_g32 : gemm_##name##_g128
inline GemmFn gated_fn(int type, int bt) {
    switch (type) {
        case ref::Q4_K: GATED_FN(q4_k);
        case ref::Q5_K: GATED_FN(q5_k);
        case ref::Q6_K: GATED_FN(q6_k);
        case ref::Q8_0: GATED_FN(q8_0);
        case ref::BF16: GATED_FN(bf16);
        case ref::F16: GATED_FN(f16);
        case ref::Q4_0: GATED_FN(q4_0);
        case ref::Q4_1: GATED_FN(q4_1);
        case ref::Q5_0: GATED_FN(q5_0);
        case ref::Q5_1: GATED_FN(q5_1);
        case ref::IQ4_NL: GATED_FN(iq4_nl);
        case ref::IQ4_XS: GATED_FN(iq4_xs);
        case ref::MXFP4: GATED_FN(mxfp4);
        case ref::Q2_K: GATED_FN(q2_k);
        case ref::Q3_K: GATED_FN(q3_k);
        default: GATED_FN(f32);
    }
}
#undef GATED_FN
// The warp-specialised gated tile gemm_<t>_gs128 (gemm_wg.cuh gemm_ws_body): 512 threads,
// WS_SMEM_BYTES(t) of dynamic smem (too much for slots over 32 bytes).
#define WS_FN(name) return gemm_##name##_gs128
inline GemmFn ws_fn(int type) {
    switch (type) {
        case ref::Q4_K: WS_FN(q4_k);
        case ref::Q5_K: WS_FN(q5_k);
        case ref::Q6_K: WS_FN(q6_k);
        case ref::Q8_0: WS_FN(q8_0);
        case ref::BF16: WS_FN(bf16);
        case ref::F16: WS_FN(f16);
        case ref::Q4_0: WS_FN(q4_0);
        case ref::Q4_1: WS_FN(q4_1);
        case ref::Q5_0: WS_FN(q5_0);
        case ref::Q5_1: WS_FN(q5_1);
        case ref::IQ4_NL: WS_FN(iq4_nl);
        case ref::IQ4_XS: WS_FN(iq4_xs);
        case ref::MXFP4: WS_FN(mxfp4);
        case ref::Q2_K: WS_FN(q2_k);
        case ref::Q3_K: WS_FN(q3_k);
        default: WS_FN(f32);
    }
}
#undef WS_FN
inline size_t ws_smem(int type) { return size_t(WS_SMEM_BYTES(type)); }
// Its 256-row form gemm_<t>_gs256 (code only where WS256_SMEM_BYTES(t) fits a block).
#define WS256_FN(name) return gemm_##name##_gs256
inline GemmFn ws256_fn(int type) {
    switch (type) {
        case ref::Q4_K: WS256_FN(q4_k);
        case ref::IQ4_XS: WS256_FN(iq4_xs);
        case ref::MXFP4: WS256_FN(mxfp4);
        case ref::Q4_0: WS256_FN(q4_0);
        case ref::Q4_1: WS256_FN(q4_1);
        case ref::IQ4_NL: WS256_FN(iq4_nl);
        default: return nullptr;
    }
}
#undef WS256_FN
inline size_t ws256_smem(int type) { return size_t(WS256_SMEM_BYTES(type)); }
// gs256 with two A stages, gemm_<t>_gs256a (code only where WS256A_SMEM_BYTES(t) fits a block).
#define WS256A_FN(name) return gemm_##name##_gs256a
inline GemmFn ws256a_fn(int type) {
    switch (type) {
        case ref::Q4_K: WS256A_FN(q4_k);
        case ref::IQ4_XS: WS256A_FN(iq4_xs);
        case ref::MXFP4: WS256A_FN(mxfp4);
        case ref::Q4_0: WS256A_FN(q4_0);
        case ref::Q4_1: WS256A_FN(q4_1);
        case ref::IQ4_NL: WS256A_FN(iq4_nl);
        default: return nullptr;
    }
}
#undef WS256A_FN
inline size_t ws256a_smem(int type) { return size_t(WS256A_SMEM_BYTES(type)); }

struct GemmCase {
    std::string name;
    int type = ref::Q4_K, variant = V_M128;
    int M = 1;               // dense rows, or tokens T for MoE
    int N = 128, K = 256;
    int E = 0, topk = 0;     // MoE when E > 0
    bool first_k = false;    // MoE routing: every token picks experts 0..topk-1
    bool pair_input = false; // MoE: one x row per pair (down projection), else per token
    bool tile_rows1 = false; // MoE: one-row tiles (the engine's decode routing), max_tiles = pairs
    bool direct = false;     // MoE, GEMV/MMV: no tables, tile t = pair t of expert ids[t] (the engine's decode)
    int gemv_threads = 0;    // GEMV block size (0: GEMV_THREADS; the engine goes down to 64 for short N)
    int layout = 0, head_dim = 0, n_head = 0;
    int ldx_pad = 4, ldy_pad = 0, x_offset = 0;  // x_offset floats: misaligns x when odd
    int check_rows = 0;      // 0: check every row and column; else this many sampled rows
    int check_cols = 0;      //    and at most this many sampled columns
};

// Row-step blocks of an mmv launch: small in the correctness cases so the grid-stride loop runs
// several steps per block; the timed cases set it from the SM count.
inline int mmv_max_blocks = 3;
// Dynamic shared memory of a gemvt_<t> launch (rw weight rows a warp, M x rows of K, rows of rb
// bytes): ops/matmul.rs gemvt_smem_bytes, gemm.cu gemvt_body's layout.
inline size_t gemvt_smem_bytes(int K, int64_t rb, int threads, int rw, int M) {
    const size_t warps = size_t(threads / 32);
    return size_t(M) * size_t(K / 8 + K / 32) * 16 + 8 * GEMVT_STAGES * warps +
           warps * GEMVT_STAGES * size_t(rw) * size_t(rb) + 16;
}
inline int gemvr_blocks = 264;  // V_GEMVR's grid cap at 256 threads (2 per SM of the H200)

// LAB_ROUTING=FILE: a routing the model chose (`tally run --routing --routing-table FILE`: `#`
// comments, a line `tokens k experts`, then k expert ids a token), used instead of a uniform
// random table by every MoE case of that many tokens, k and experts (first-k cases excepted).
// Read once; a file that does not parse is fatal (exit 2), so a timing never silently falls
// back to the uniform table it was meant to replace.
struct RecordedRouting {
    int T = 0, k = 0, E = 0;
    std::vector<int32_t> ids;
    std::string path;
};
inline const RecordedRouting& recorded_routing() {
    static const RecordedRouting r = [] {
        RecordedRouting r;
        const char* p = std::getenv("LAB_ROUTING");
        if (!p || !*p) return r;
        r.path = p;
        FILE* f = std::fopen(p, "r");
        auto fail = [&](const char* why) {
            std::fprintf(stderr, "LAB_ROUTING=%s: %s\n", p, why);
            std::exit(2);
        };
        if (!f) fail("cannot open");
        char line[4096];
        bool head = false;
        size_t n = 0;
        while (std::fgets(line, sizeof line, f)) {
            if (line[0] == '#') continue;
            char* q = line;
            if (!head) {
                if (std::sscanf(line, "%d %d %d", &r.T, &r.k, &r.E) != 3 || r.T <= 0 || r.k <= 0 ||
                    r.E < r.k)
                    fail("the first line is not `tokens k experts`");
                head = true;
                r.ids.reserve(size_t(r.T) * r.k);
                continue;
            }
            for (;;) {
                char* end = nullptr;
                const long v = std::strtol(q, &end, 10);
                if (end == q) break;
                if (v < 0 || v >= r.E) fail("an expert id out of range");
                r.ids.push_back(int32_t(v));
                q = end;
                ++n;
            }
        }
        std::fclose(f);
        if (!head || n != size_t(r.T) * r.k) fail("not tokens x k ids");
        return r;
    }();
    return r;
}

// Everything a case needs on the host.
struct Setup {
    GemmCase c;
    int M = 0, x_rows = 0;   // output rows (pairs for MoE), input rows
    int64_t ldx = 0, ldy = 0, rb = 0;
    int max_tiles = 0, bm = 0;
    std::vector<uint8_t> w;  // (E or 1) * N rows
    std::vector<float> x;    // x_offset + x_rows * ldx
    std::vector<int32_t> ids;
    ref::Routing routing;
};

// Weights and x may be passed in (the bench reuses them across variants); x must then have
// x_offset + x_rows * (K + ldx_pad) elements.
inline Setup make_setup(const GemmCase& c, ref::Rng& rng, const std::vector<uint8_t>* shared_w = nullptr,
                        const std::vector<float>* shared_x = nullptr) {
    Setup s;
    s.c = c;
    const bool moe = c.E > 0;
    s.M = moe ? c.M * c.topk : c.M;
    s.x_rows = moe && !c.pair_input ? c.M : s.M;
    s.ldx = c.K + c.ldx_pad;
    s.ldy = c.N + c.ldy_pad;
    s.rb = ref::row_bytes(c.type, c.K);
    if (shared_w) s.w = *shared_w;
    else s.w = ref::random_weights(c.type, int64_t(moe ? c.E : 1) * c.N, c.K, rng);
    if (shared_x) {
        s.x = *shared_x;
    } else {
        // Uniform in [-2, 2), never exactly zero.
        s.x.resize(size_t(c.x_offset + int64_t(s.x_rows) * s.ldx));
        for (auto& v : s.x) {
            do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
        }
    }
    s.bm = variant_bm(c.variant);
    if (moe) {
        const RecordedRouting& rec = recorded_routing();
        if (c.first_k) s.ids = ref::route_first_k(c.M, c.topk);
        else if (rec.T == c.M && rec.k == c.topk && rec.E == c.E) s.ids = rec.ids;
        else s.ids = ref::route_random(c.M, c.topk, c.E, rng);
        // The engine's bound: every expert's rows in ceil(count / bm) tiles, so at most
        // ceil(M / bm) + min(E, M) tiles, and exactly M for one-row tiles (bm = 1: decode).
        s.max_tiles = c.tile_rows1 || c.direct ? s.M : (s.M + s.bm - 1) / s.bm + std::min(c.E, s.M);
        if (c.tile_rows1 || c.direct) s.bm = 1;
        s.routing = ref::route_host(s.ids, c.E, s.bm, s.max_tiles);
    }
    return s;
}

// A MoE setup's routing tables for tiles of bm rows (the same ids, x and weights).
inline Setup with_tile_rows(const Setup& s, int bm) {
    Setup r = s;
    r.bm = bm;
    r.max_tiles = (s.M + bm - 1) / bm + std::min(s.c.E, s.M);
    r.routing = ref::route_host(s.ids, s.c.E, bm, r.max_tiles);
    return r;
}

// float64 reference of the listed (row, weight row n) entries, threaded over columns.
inline void reference(const Setup& s, const std::vector<int>& rows, const std::vector<int>& cols,
                      std::vector<double>& out) {
    const GemmCase& c = s.c;
    out.assign(rows.size() * cols.size(), 0.0);
    const int nth = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    auto work = [&](int t0) {
        std::vector<float> wrow(size_t(c.K));
        std::vector<std::vector<float>> by_e(size_t(std::max(c.E, 1)));
        for (size_t ci = size_t(t0); ci < cols.size(); ci += size_t(nth)) {
            const int n = cols[ci];
            for (auto& v : by_e) v.clear();
            for (size_t ri = 0; ri < rows.size(); ri++) {
                const int r = rows[ri];
                int e = 0, xr = r;
                if (c.E > 0) {
                    e = s.ids[size_t(r)];
                    xr = c.pair_input ? r : r / c.topk;
                }
                auto& wv = by_e[size_t(e)];
                if (wv.empty()) {
                    wv.resize(size_t(c.K));
                    ref::dequant_row(c.type, s.w.data() + (int64_t(e) * c.N + n) * s.rb, c.K, wv.data());
                }
                out[ri * cols.size() + ci] = ref::dot64(s.x.data() + c.x_offset + int64_t(xr) * s.ldx, wv.data(), c.K);
            }
        }
    };
    std::vector<std::thread> th;
    for (int t = 0; t < nth; t++) th.emplace_back(work, t);
    for (auto& t : th) t.join();
}

struct CaseResult {
    double rel = 0;
    int64_t nonfinite = 0, poison_bad = 0, unwritten = 0;
    bool pass = false;
};

constexpr double kGemmBound = 5e-3;  // tensor-core kernels (f16 operands)
constexpr double kGemvBound = 1e-5;  // f32 GEMV (the float formats, K > GEMV_QK_MAX)
// Integer GEMV (gemv_int_body: x rounded to int16 per 16 elements, ~2e-5 for Gaussian x).
constexpr double kGemvIntBound = 6e-5;
inline bool gemv_is_int(int type, int K) { return qt_has_bytes(type) && K <= GEMV_QK_MAX; }
constexpr double kSimtBound = 2e-6;  // f32 SIMT GEMM (measured ~2e-7 at K = 2048) and its 3xTF32 form

// Compares y (downloaded) with the reference; prints a verdict line (and the first mismatches).
inline CaseResult check_case(const Setup& s, const std::vector<float>& y, bool quiet_pass) {
    const GemmCase& c = s.c;
    CaseResult res;
    std::vector<int> rows, cols;
    ref::Rng pick(0xC0FFEE ^ uint64_t(c.M * 131 + c.N));
    if (c.check_rows > 0 && c.check_rows < s.M) {
        for (int i = 0; i < c.check_rows; i++) rows.push_back(i == 0 ? 0 : i == 1 ? s.M - 1 : pick.below(s.M));
    } else {
        for (int r = 0; r < s.M; r++) rows.push_back(r);
    }
    if (c.check_cols > 0 && c.check_cols < c.N) {
        const int step = c.N / c.check_cols;
        for (int n = 0; n < c.N; n += step) cols.push_back(std::min(c.N - 1, n + pick.below(step)));
        cols.push_back(c.N - 1);
    } else {
        for (int n = 0; n < c.N; n++) cols.push_back(n);
    }
    std::vector<double> want;
    reference(s, rows, cols, want);
    ref::ErrStat st;
    double rms = 0;
    for (double v : want) rms += v * v;
    rms = std::sqrt(rms / double(std::max<size_t>(1, want.size())));
    int shown = 0;
    const double bound = c.variant == V_GEMV || c.variant == V_GEMV4 ? (gemv_is_int(c.type, c.K) ? kGemvIntBound : kGemvBound)
                         : variant_simt(c.variant)                 ? kSimtBound
                                                                   : kGemmBound;
    char lines[8][160];
    for (size_t ri = 0; ri < rows.size(); ri++) {
        for (size_t ci = 0; ci < cols.size(); ci++) {
            const int r = rows[ri], n = cols[ci];
            const int col = ref::out_col(n, c.layout, c.head_dim, c.n_head);
            const double got = y[size_t(r * s.ldy + col)], wv = want[ri * cols.size() + ci];
            ref::err_add(st, got, wv);
            const bool badv = !std::isfinite(got) || std::fabs(got - wv) > 20 * bound * std::max(std::fabs(wv), rms);
            if (badv && shown < 8) {
                std::snprintf(lines[shown++], sizeof(lines[0]), "      y[%d, col %d (n %d)] = %.6g, want %.6g", r, col, n, got, wv);
            }
        }
    }
    // Every output row must be fully written (cheap full scan); padding columns stay NaN.
    for (int r = 0; r < s.M; r++) {
        for (int64_t j = 0; j < s.ldy; j++) {
            const float v = y[size_t(r * s.ldy + j)];
            if (j < c.N) res.unwritten += std::isnan(v) ? 1 : 0;
            else res.poison_bad += std::isnan(v) ? 0 : 1;
        }
    }
    res.rel = st.rel();
    res.nonfinite = st.nonfinite;
    res.pass = res.rel < bound && st.nonfinite == 0 && res.poison_bad == 0 && res.unwritten == 0;
    if (!res.pass || !quiet_pass) {
        std::printf("  %s %-34s %-5s %-4s M=%-5d N=%-6d K=%-5d rel=%.3e nonfinite=%lld unwritten=%lld padding_written=%lld (checked %zux%zu)\n",
                    res.pass ? "ok  " : "FAIL", c.name.c_str(), ref::type_name(c.type), variant_name(c.variant), s.M, c.N, c.K,
                    res.rel, (long long)res.nonfinite, (long long)res.unwritten, (long long)res.poison_bad, rows.size(), cols.size());
        for (int i = 0; i < shown; i++) std::printf("%s\n", lines[i]);
    }
    return res;
}

// Device-side buffers and arguments of a case.
struct DevCase {
    GemmArgs args{};
    // The wgmma tiles: x converted by x_f16_perm first (done once by upload_case; the bench
    // times it with every launch).
    XPermArgs xperm{};
    bool has_xperm = false;
    unsigned gx = 0, gy = 0;
    int threads = 0;
    size_t smem = 0, y_elems = 0;
    float* y = nullptr;
};

template <class B>
DevCase upload_case(B& b, const Setup& s, const uint8_t* dev_w = nullptr) {
    const GemmCase& c = s.c;
    DevCase d;
    GemmArgs& a = d.args;
    a.w = dev_w ? dev_w : b.upload(s.w);
    a.w_row_bytes = s.rb;
    a.w_expert_bytes = c.E > 0 ? s.rb * c.N : 0;
    a.x = b.upload(s.x) + c.x_offset;
    a.ldx = s.ldx;
    d.y_elems = size_t(s.M) * size_t(s.ldy);
    d.y = b.template alloc<float>(d.y_elems);
    a.y = d.y;
    a.ldy = s.ldy;
    a.M = s.M;
    a.N = c.N;
    a.K = c.K;
    a.layout = c.layout;
    a.head_dim = c.head_dim;
    a.n_head = c.n_head;
    const bool mmv = c.variant == V_MMV;
    const bool gemvt = c.variant == V_GEMVT || c.variant == V_GEMVT2 || c.variant == V_GEMVT4;
    const bool gemv = c.variant == V_GEMV || c.variant == V_GEMV4 || c.variant == V_GEMVR || c.variant == V_GEMVR4 || gemvt || mmv;
    if (c.E > 0) {
        a.n_expert = c.E;
        a.x_div = c.pair_input ? 1 : c.topk;
        if (c.direct) {  // the router's ids are the tile experts; sorted_rows, tile_start/rows null
            a.tile_expert = b.upload(s.ids);
        } else {
            a.sorted_rows = b.upload(s.routing.sorted);
            a.tile_expert = b.upload(s.routing.tile_expert);
            a.tile_start = b.upload(s.routing.tile_start);
            a.tile_rows = b.upload(s.routing.tile_rows);
        }
        d.gy = unsigned(s.max_tiles);
    } else {
        d.gy = unsigned(gemv ? s.M : (s.M + s.bm - 1) / s.bm);
    }
    const int gemv_t = c.gemv_threads > 0 ? c.gemv_threads : GEMV_THREADS;
    const int gemv_rows = (c.variant == V_GEMV4 ? 4 : 2) * (gemv_t / 32);  // V_GEMVR: 4, below
    d.gx = unsigned(gemv ? (c.N + gemv_rows - 1) / gemv_rows : (c.N + GEMM_BN - 1) / GEMM_BN);
    d.threads = gemv ? gemv_t : c.variant == V_XS128 ? WS_THREADS : GEMM_THREADS;
    if (mmv) {  // grid-stride over row steps: at most mmv_max_blocks blocks per x row / tile
        const int steps = (c.N + mmv_rows_per_step(c.type, c.K) - 1) / mmv_rows_per_step(c.type, c.K);
        d.gx = unsigned(std::min(steps, mmv_max_blocks));
        d.threads = MMV_THREADS;
    }
    if (variant_simt(c.variant)) {  // square block tiles: bm x bm
        d.gx = unsigned((c.N + s.bm - 1) / s.bm);
        d.threads = SIMT_THREADS;
    }
    d.smem = variant_smem(c.type, c.variant);
    if (c.variant == V_GEMVR || c.variant == V_GEMVR4) {  // engine's gemvr_grid: gemv4's block size, at most 2 blocks/SM at 256
        const int rows = (c.variant == V_GEMVR ? 4 : 2) * (gemv_t / 32);  // gemvr4: 2 a warp
        const int groups = (c.N + rows - 1) / rows;
        d.gx = unsigned(std::min(groups, gemvr_blocks * (GEMV_THREADS / gemv_t)));
        d.gy = 1;
        d.smem = size_t(s.M) * size_t(c.K / 8 + c.K / 32) * 16;
    }
    if (gemvt) {  // ops/matmul.rs gemvt_launch: rw rows a warp, as many blocks as fit
        const int rw = c.variant == V_GEMVT ? 4 : 2, warps = gemv_t / 32;
        const int groups = (c.N + rw * warps - 1) / (rw * warps);
        d.smem = gemvt_smem_bytes(c.K, s.rb, gemv_t, rw, s.M);
        const int per_sm = std::max(1, int(233472 / (d.smem + 1024)));
        d.gx = unsigned(std::min(groups, per_sm * gemvr_blocks / 2));
        d.gy = 1;
    }
    if (variant_wgx(c.variant)) {
        const int nblk = (c.N + GEMM_BN - 1) / GEMM_BN;
        // A block walks 4 weight blocks of x32, 8 of the others (ops/matmul.rs WgTile::walk); x32g
        // (lab only) all of them. LAB_WGX_WALK=n (timing experiments): every x-resident variant n.
        const char* walk = std::getenv("LAB_WGX_WALK");
        const int per = walk != nullptr && std::atoi(walk) > 0 ? std::atoi(walk) : c.variant == V_X32 ? 4 : c.variant == V_X32G ? nblk : 8;
        d.gx = unsigned((nblk + per - 1) / per);
    }
    if (variant_wg(c.variant)) {
        XPermArgs& xp = d.xperm;
        xp.x = a.x;
        xp.ldx = a.ldx;
        xp.M = s.x_rows;
        xp.K = c.K;
        xp.ldo = c.K;
        xp.kquant = qt_is_kquant(c.type) ? 1 : 0;
        xp.out = b.template alloc<u16>(size_t(s.x_rows) * size_t(c.K));
        d.has_xperm = true;
        b.xperm(xp);
        a.xh = xp.out;
        a.ldxh = c.K;
    }
    return d;
}

template <class B>
CaseResult run_case(B& b, const GemmCase& c, ref::Rng& rng, bool quiet_pass) {
    Setup s = make_setup(c, rng);
    DevCase d = upload_case(b, s);
    b.poison(d.y, d.y_elems);
    b.gemm(gemm_fn(c.type, c.variant), d.gx, d.gy, d.threads, d.smem, d.args);
    std::vector<float> y = b.download(d.y, d.y_elems);
    CaseResult r = check_case(s, y, quiet_pass);
    b.release();
    return r;
}

// The correctness matrix: every type x variant over shapes that hit the edge paths.
inline std::vector<GemmCase> correctness_cases(bool small) {
    std::vector<GemmCase> cs;
    for (int t : ref::ALL_TYPES) {
        for (int v : {V_M128, V_M64, V_M32, V_GEMV, V_MMV, V_GEMV4, V_S16, V_S32, V_W32, V_W64, V_W128, V_X64, V_X96, V_X128, V_X32G, V_X32, V_XS128}) {
            if (variant_smem(t, v) > 232448) continue;  // x128 of the 112- and 128-byte slots (Q6_K, F32)
            GemmCase c;
            c.type = t;
            c.variant = v;
            // Dense, M and N not multiples of the tile, vector stores.
            c.name = "dense M%BM!=0 N%BN!=0";
            c.M = 37;
            c.N = 136;
            c.K = 512;
            cs.push_back(c);
            // Tiny N, rows crossing a 128 tile, odd ldy (scalar stores), misaligned x (scalar loads).
            c.name = "dense tinyN oddldy misaligned-x";
            c.M = small ? 33 : 130;
            c.N = 32;
            c.K = 256;
            c.ldy_pad = 3;
            c.ldx_pad = 1;
            c.x_offset = 1;
            cs.push_back(c);
            c.ldy_pad = 0;
            c.ldx_pad = 4;
            c.x_offset = 0;
            // q/gate split layout.
            c.name = "dense qgate-split";
            c.M = 20;
            c.N = 256;
            c.K = 256;
            c.layout = 1;
            c.head_dim = 64;
            c.n_head = 2;
            cs.push_back(c);
            c.layout = c.head_dim = c.n_head = 0;
            if (v == V_GEMV || v == V_MMV || v == V_GEMV4) {
                // Decode shapes: one x row (M = 1, 2), K = 2048 / 4096 (mmv's groups span 2 / 4
                // warps: the shared-memory reduction), N not a multiple of the row step.
                c.name = "dense decode K=2048";
                c.M = 1;
                c.N = 100;
                c.K = 2048;
                cs.push_back(c);
                c.name = "dense decode K=4096 M=2";
                c.M = 2;
                c.N = 70;
                c.K = 4096;
                cs.push_back(c);
                c.name = "moe decode gate K=2048";
                c.M = 1;
                c.topk = 4;
                c.E = 16;
                c.N = 72;
                c.K = 2048;
                cs.push_back(c);
                c.name = "moe decode gate K=2048 direct (no tables)";
                c.direct = true;
                cs.push_back(c);
                c.name = "moe decode down K=512 direct, 2 tokens";
                c.M = 2;
                c.pair_input = true;
                c.N = 300;
                c.K = 512;
                cs.push_back(c);
                c.direct = c.pair_input = false;
                c.topk = c.E = 0;
                if (v == V_GEMV) {
                    c.name = "dense decode short N, 64-thread blocks";
                    c.M = 1;
                    c.N = 38;
                    c.K = 2048;
                    c.gemv_threads = 64;
                    cs.push_back(c);
                    c.name = "dense decode 128-thread blocks, M=3";
                    c.M = 3;
                    c.N = 100;
                    c.gemv_threads = 128;
                    cs.push_back(c);
                    c.gemv_threads = 0;
                }
            }
            // MoE gate/up: one x row per token, random routing.
            c.name = "moe gate random";
            c.M = 29;
            c.topk = 4;
            c.E = 16;
            c.N = 136;
            c.K = 256;
            cs.push_back(c);
            // MoE down: one x row per pair.
            c.name = "moe down random";
            c.pair_input = true;
            c.N = 64;
            c.K = 512;
            cs.push_back(c);
            if (variant_wgx(v)) {  // 9 weight blocks: x32g walks all, x32 three strided walks, the others two
                c.name = "moe down wide";
                c.N = 1100;
                cs.push_back(c);
                c.N = 64;
            }
            c.pair_input = false;
            // MoE first-k: 4 experts hold all pairs (several tiles per expert).
            c.name = "moe gate first-k";
            c.first_k = true;
            c.M = small ? 40 : 150;
            c.N = 128;
            c.K = 256;
            cs.push_back(c);
            c.first_k = false;
            c.E = c.topk = 0;
        }
    }
    return cs;
}

// The f32 GEMMs (gemm_f32_simt, _simt_m32, _tf32, _tf32_m32): F32 weights, dense. Router shapes
// (N = 256 / 64 / 8 experts) with ldx > K and ldy > N, x misaligned by one float (scalar loads),
// K not a multiple of the K step or of 4, and the q/gate split layout.
inline std::vector<GemmCase> simt_cases() {
    struct S { const char* name; int M, N, K, ldx_pad, ldy_pad, x_offset, layout; };
    const S shapes[] = {
        {"simt M=1 router", 1, 256, 2048, 4, 3, 0, 0},
        {"simt mid router misaligned-x", 7, 64, 1024, 1, 5, 1, 0},
        {"simt tiny router", 100, 8, 256, 4, 1, 0, 0},
        {"simt router pp513", 513, 256, 2048, 8, 2, 0, 0},
        {"simt K%4!=0", 70, 40, 203, 3, 0, 0, 0},
        {"simt K%16!=0", 65, 100, 1000, 4, 0, 0, 0},
        {"simt qgate-split", 20, 256, 256, 4, 0, 0, 1},
    };
    std::vector<GemmCase> cs;
    for (const S& sh : shapes) {
        for (int v : {V_SIMT, V_SIMT_M32, V_TF32, V_TF32_M32}) {
            GemmCase c;
            c.name = sh.name;
            c.type = ref::F32;
            c.variant = v;
            c.M = sh.M;
            c.N = sh.N;
            c.K = sh.K;
            c.ldx_pad = sh.ldx_pad;
            c.ldy_pad = sh.ldy_pad;
            c.x_offset = sh.x_offset;
            if (sh.layout == 1) {
                c.layout = 1;
                c.head_dim = 64;
                c.n_head = 2;
            }
            cs.push_back(c);
        }
    }
    return cs;
}

// ---- pieces: dequant8 (bit-exact), Piece::to_f16 (f16 bound), Piece::to_parts ----------------
// A probe of `rows` rows of K elements: dq8 [rows][K] from dequant8, h16 [rows][K] from to_f16,
// parts [rows][K/32][36]: v[32], sc[2], off[2] of each piece. Filled by the backend (the GPU
// through a kernel, the emulator by direct calls); checked here.
struct PieceProbe {
    std::vector<float> dq8, parts;
    std::vector<uint16_t> h16;
};
inline int host_seg(int type, int p, int s) {
    const bool kq = type == ref::Q4_K || type == ref::Q5_K || type == ref::Q6_K;
    const int s0 = kq ? 64 * (p >> 1) + 16 * (p & 1) : 32 * p;
    return s ? s0 + (kq ? 32 : 16) : s0;
}
// Per-element bound of the f16 decode against the exact f32 value: the K-quant paths round
// d*sc (and dmin*m) to f16 before one f16 FMA; the others round once (bound 0: must equal
// RN16(exact)).
inline double f16_bound(int type, const uint8_t* row, int e, double want) {
    const uint8_t* b;
    switch (type) {
        case ref::Q4_K:
        case ref::Q5_K: {
            b = row + (e / 256) * (type == ref::Q4_K ? 144 : 176);
            const double d = ref::half_at(b), dmin = ref::half_at(b + 2);
            int sc, m;
            ref::scale_min((e % 256) / 32, b + 4, sc, m);
            const double qmax = type == ref::Q4_K ? 15 : 31;
            return std::ldexp(1.0, -10) * (std::fabs(d * sc) * qmax + std::fabs(dmin * m) + std::fabs(want)) + std::ldexp(1.0, -24);
        }
        case ref::Q6_K: {
            b = row + (e / 256) * 210;
            const int h = (e % 256) / 128, s = (e % 128) / 32, l = e % 32;
            const double ds = ref::half_at(b + 208) * double(int8_t(b[192 + 8 * h + 2 * s + l / 16]));
            return std::ldexp(1.0, -10) * (32 * std::fabs(ds) + std::fabs(want)) + std::ldexp(1.0, -24);
        }
        // One f16 FMA (q * d + m) against the f32 value: half an f16 ulp (double rounding).
        case ref::Q4_1:
        case ref::Q5_1: return std::ldexp(1.0, -11) * std::fabs(want) + std::ldexp(1.0, -25);
        // A scale product rounded to f16, then one f16 product (as the K-quants).
        case ref::IQ4_XS: {
            b = row + (e / 256) * 136;
            const int ib = (e % 256) / 32, sh = b[2] | (b[3] << 8);
            const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            return std::ldexp(1.0, -10) * (127 * std::fabs(ref::half_at(b) * (ls - 32)) + std::fabs(want)) + std::ldexp(1.0, -24);
        }
        case ref::Q2_K: {
            b = row + (e / 256) * 84;
            const int g = 8 * ((e % 256) / 128) + 2 * ((e % 128) / 32) + (e % 32) / 16;
            return std::ldexp(1.0, -10) * (3 * std::fabs(ref::half_at(b + 80) * (b[g] & 15)) +
                                           std::fabs(ref::half_at(b + 82) * (b[g] >> 4)) + std::fabs(want)) +
                   std::ldexp(1.0, -24);
        }
        case ref::Q3_K: {
            b = row + (e / 256) * 110;
            return std::ldexp(1.0, -10) * (4 * 32 * std::fabs(ref::half_at(b + 108)) + std::fabs(want)) + std::ldexp(1.0, -24);
        }
        // Q4_0, Q5_0, IQ4_NL, MXFP4 (and Q8_0, the floats): one rounding, must equal RN16(exact).
        default: return 0.0;
    }
}
inline bool check_pieces(int type, const std::vector<uint8_t>& w, int K, int rows, const PieceProbe& g) {
    const int64_t rb = ref::row_bytes(type, K);
    const int P = K / 32;
    std::vector<float> want(static_cast<size_t>(K));
    int bad8 = 0, bad16 = 0, badp = 0;
    for (int r = 0; r < rows; r++) {
        const uint8_t* row = w.data() + r * rb;
        ref::dequant_row(type, row, K, want.data());
        for (int k = 0; k < K; k++) {
            const float o = g.dq8[size_t(r) * K + k];
            if (ref::f32_bits(o) != ref::f32_bits(want[size_t(k)])) {
                if (bad8 < 4) std::printf("      dequant8 row %d k %d: %.9g want %.9g\n", r, k, o, want[size_t(k)]);
                bad8++;
            }
            const uint16_t h = g.h16[size_t(r) * K + k];
            const double got = ref::hf16_to_f64(h), wv = want[size_t(k)];
            const double bound = f16_bound(type, row, k, wv);
            const bool ok16 = bound == 0.0 ? h == ref::hf32_to_f16(want[size_t(k)]) : std::fabs(got - wv) <= bound;
            if (!ok16) {
                if (bad16 < 4) std::printf("      to_f16 row %d elem %d: %.9g want %.9g (bound %.3g)\n", r, k, got, wv, bound);
                bad16++;
            }
        }
        for (int p = 0; p < P; p++) {
            const float* q = g.parts.data() + (size_t(r) * P + p) * 36;
            for (int i = 0; i < 32; i++) {
                const int e = host_seg(type, p, i / 16) + i % 16;
                const double wv = want[size_t(e)], s = q[32 + i / 16], of = q[34 + i / 16];
                const double rec = s * q[i] + of;
                if (!(std::fabs(rec - wv) <= 1e-6 * (std::fabs(wv) + std::fabs(of) + std::fabs(s * q[i])) + 1e-30)) {
                    if (badp < 4) std::printf("      to_parts row %d p %d elem %d: %.9g want %.9g\n", r, p, e, rec, wv);
                    badp++;
                }
            }
        }
    }
    const bool pass = bad8 == 0 && bad16 == 0 && badp == 0;
    std::printf("  %s pieces %-5s K=%d: dequant8 %d bad (bit-exact), to_f16 %d bad, to_parts %d bad\n", pass ? "ok  " : "FAIL",
                ref::type_name(type), K, bad8, bad16, badp);
    return pass;
}

// dequant_rows: bit-exact against the reference, one bad row id (NaN row + error count).
template <class B>
bool run_dequant_rows_case(B& b, int type, ref::Rng& rng) {
    const int K = 512, rows_w = 9;
    const std::vector<uint8_t> w = ref::random_weights(type, rows_w, K, rng);
    const std::vector<int32_t> ids = {3, 0, 8, 8, 42, 5};  // 42: out of range
    const int n = int(ids.size());
    DequantRowsArgs a{};
    a.w = b.upload(w);
    a.row_bytes = ref::row_bytes(type, K);
    a.type = type;
    a.K = K;
    a.n_rows_w = rows_w;
    a.row_ids = b.upload(ids);
    a.row0 = 0;
    a.n_rows = n;
    const int64_t ldo = K + 8;
    float* out = b.template alloc<float>(size_t(n * ldo));
    b.poison(out, size_t(n * ldo));
    a.out = out;
    a.ldo = ldo;
    int32_t* err = b.upload(std::vector<int32_t>{0});
    a.err = err;
    b.dequant(a, unsigned((K + 2047) / 2048), unsigned(n));
    const std::vector<float> got = b.download(out, size_t(n * ldo));
    const int32_t errs = b.download(err, 1)[0];
    std::vector<float> want(static_cast<size_t>(K));
    int64_t mism = 0;
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const bool valid = ids[size_t(i)] < rows_w;
        if (valid) ref::dequant_row(type, w.data() + ids[size_t(i)] * a.row_bytes, K, want.data());
        for (int k = 0; k < ldo; k++) {
            const float g = got[size_t(i * ldo + k)];
            bool ok;
            if (k >= K) ok = std::isnan(g);
            else if (!valid) ok = std::isnan(g);
            else ok = ref::f32_bits(g) == ref::f32_bits(want[size_t(k)]);
            if (!ok) {
                mism++;
                if (shown++ < 5)
                    std::printf("      row %d (id %d) k %d: got %.9g want %.9g\n", i, ids[size_t(i)], k, g,
                                valid && k < K ? want[size_t(k)] : NAN);
            }
        }
    }
    const bool pass = mism == 0 && errs == 1;
    std::printf("  %s dequant_rows %-5s K=%d: %lld mismatches (bit-exact), bad-id count %d (want 1)\n", pass ? "ok  " : "FAIL",
                ref::type_name(type), K, (long long)mism, errs);
    b.release();
    return pass;
}

// moe_route against the host routing.
template <class B>
bool run_route_case(B& b, const char* name, std::vector<int32_t> ids, int T, int k, int E, int bm, int max_tiles,
                    int chunk = 0) {
    MoeRouteArgs a{};
    const int P = T * k;
    // chunk 0: one block (the whole list); else ceil(P / chunk) blocks with per-block counts.
    a.chunk = chunk > 0 ? chunk : std::max(P, 1);
    const int blocks = std::max(1, (P + a.chunk - 1) / a.chunk);
    a.bcount = blocks > 1 ? b.upload(std::vector<int32_t>(size_t(blocks) * size_t(E + 1), -7)) : nullptr;
    a.ids = b.upload(ids);
    a.n_tokens = T;
    a.k = k;
    a.n_expert = E;
    a.bm = bm;
    a.max_tiles = max_tiles;
    a.counts = b.upload(std::vector<int32_t>(size_t(E), -7));
    a.sorted_rows = b.upload(std::vector<int32_t>(size_t(std::max(P, 1)), -7));
    a.tile_expert = b.upload(std::vector<int32_t>(size_t(std::max(max_tiles, 1)), -7));
    a.tile_start = b.upload(std::vector<int32_t>(size_t(std::max(max_tiles, 1)), -7));
    a.tile_rows = b.upload(std::vector<int32_t>(size_t(std::max(max_tiles, 1)), -7));
    a.err = b.upload(std::vector<int32_t>{-7, -7});
    b.route(a, blocks);
    const ref::Routing want = ref::route_host(ids, E, bm, max_tiles);
    auto cmp = [&](const char* what, const int32_t* dev, const std::vector<int32_t>& w) {
        if (w.empty()) return 0;
        const std::vector<int32_t> g = b.download(dev, w.size());
        int bad = 0;
        for (size_t i = 0; i < w.size(); i++) {
            if (g[i] != w[i]) {
                if (bad < 4) std::printf("      %s[%zu] = %d, want %d\n", what, i, g[i], w[i]);
                bad++;
            }
        }
        return bad;
    };
    int bad = cmp("counts", a.counts, want.counts) + cmp("sorted_rows", a.sorted_rows, want.sorted) +
              cmp("tile_expert", a.tile_expert, want.tile_expert) + cmp("tile_start", a.tile_start, want.tile_start) +
              cmp("tile_rows", a.tile_rows, want.tile_rows);
    const std::vector<int32_t> err = b.download(a.err, 2);
    if (err[0] != want.bad || err[1] != want.uncovered) {
        std::printf("      err = {%d, %d}, want {%d, %d}\n", err[0], err[1], want.bad, want.uncovered);
        bad++;
    }
    std::printf("  %s moe_route %-28s T=%-5d k=%d E=%d bm=%-3d max_tiles=%-5d blocks=%-3d: %d mismatches\n",
                bad ? "FAIL" : "ok  ", name, T, k, E, bm, max_tiles, blocks, bad);
    b.release();
    return bad == 0;
}

template <class B>
int run_route_cases(B& b, ref::Rng& rng, bool big) {
    int fails = 0;
    auto mt = [](int P, int bm, int E) { return (P + bm - 1) / bm + E; };
    fails += !run_route_case(b, "random", ref::route_random(37, 8, 256, rng), 37, 8, 256, 32, mt(296, 32, 256));
    fails += !run_route_case(b, "random", ref::route_random(512, 8, 256, rng), 512, 8, 256, 64, mt(4096, 64, 256));
    fails += !run_route_case(b, "first-k", ref::route_first_k(100, 8), 100, 8, 256, 32, mt(800, 32, 256));
    {
        auto ids = ref::route_random(64, 8, 256, rng);
        ids[3] = -1;
        ids[100] = 256;
        ids[200] = 1 << 30;
        ids[201] = -(1 << 30);
        fails += !run_route_case(b, "invalid ids", ids, 64, 8, 256, 32, mt(512, 32, 256));
    }
    fails += !run_route_case(b, "max_tiles too small", ref::route_random(64, 8, 256, rng), 64, 8, 256, 32, 40);
    fails += !run_route_case(b, "small E", ref::route_random(50, 4, 16, rng), 50, 4, 16, 8, mt(200, 8, 16));
    // Several blocks (moe_route_count first): even and uneven chunks, invalid ids, too few tiles.
    fails += !run_route_case(b, "random 4 blocks", ref::route_random(512, 8, 256, rng), 512, 8, 256, 64,
                             mt(4096, 64, 256), 1024);
    fails += !run_route_case(b, "random uneven blocks", ref::route_random(37, 8, 256, rng), 37, 8, 256, 32,
                             mt(296, 32, 256), 100);
    fails += !run_route_case(b, "first-k 7 blocks", ref::route_first_k(100, 8), 100, 8, 256, 32, mt(800, 32, 256), 128);
    {
        auto ids = ref::route_random(64, 8, 256, rng);
        ids[3] = -1;
        ids[100] = 256;
        ids[300] = 1 << 30;
        ids[511] = -(1 << 30);
        fails += !run_route_case(b, "invalid ids 4 blocks", ids, 64, 8, 256, 32, mt(512, 32, 256), 128);
    }
    fails += !run_route_case(b, "max_tiles too small 4 blocks", ref::route_random(64, 8, 256, rng), 64, 8, 256, 32, 40,
                             128);
    fails += !run_route_case(b, "small E 3 blocks", ref::route_random(50, 4, 16, rng), 50, 4, 16, 8, mt(200, 8, 16), 70);
    if (big) {
        fails += !run_route_case(b, "random pp8192", ref::route_random(8192, 8, 256, rng), 8192, 8, 256, 128,
                                 mt(65536, 128, 256));
        fails += !run_route_case(b, "first-k pp8192", ref::route_first_k(8192, 8), 8192, 8, 256, 32, mt(65536, 32, 256));
        fails += !run_route_case(b, "random pp8192 64 blocks", ref::route_random(8192, 8, 256, rng), 8192, 8, 256, 128,
                                 mt(65536, 128, 256), 1024);
    }
    return fails;
}

// The gated tile of height variant_bm(variant) (V_W32: g32, V_W128: g128) against the two unfused
// launches of that variant over the same routing and x: y3 must equal silu(gate) * up bit for
// bit, as the backend's silu_mul computes it from the two outputs (the binary map's expression),
// at every (pair, column), and leave the padding columns poisoned. MoE gate/up shape of T tokens,
// top 4 of 16 experts (or the 35B shape: 256 experts, top 8, when `big`). Returns 1 on failure.
// ws: the warp-specialised gs128 (128) or gs256 (256) instead of the gated tile (variant V_W128
// only; gs256 on the same case's routing in 256-row tiles, against the unfused 128-row launches);
// a2 with 256: gs256a (two A stages) instead of gs256.
template <class B>
inline int check_gated(B& b, int type, int variant, int tokens, int N, int K, bool big, ref::Rng& rng, int ws = 0,
                       bool a2 = false) {
    GemmCase c;
    c.name = "moe gated gate/up";
    c.type = type;
    c.variant = variant;
    c.M = tokens;
    c.topk = big ? 8 : 4;
    c.E = big ? 256 : 16;
    c.N = N;
    c.K = K;
    const Setup s = make_setup(c, rng);
    Setup su = s;
    su.w = ref::random_weights(type, int64_t(c.E) * c.N, c.K, rng);
    DevCase dg = upload_case(b, s), du = upload_case(b, su);
    const size_t ny = dg.y_elems;
    b.poison(dg.y, ny);
    b.poison(du.y, ny);
    b.gemm(gemm_fn(type, variant), dg.gx, dg.gy, dg.threads, dg.smem, dg.args);
    b.gemm(gemm_fn(type, variant), du.gx, du.gy, du.threads, du.smem, du.args);
    float* want = b.template alloc<float>(ny);
    b.silu_mul(dg.y, du.y, want, ny);
    float* y3 = b.template alloc<float>(ny);
    b.poison(y3, ny);
    GemmArgs a = dg.args;
    a.y = nullptr;  // the gated tile writes y3 only
    a.w2 = du.args.w;
    a.y3 = y3;
    a.ldy3 = s.ldy;
    const int bt = variant_bm(variant);
    if (ws == 256) {
        const Setup s256 = with_tile_rows(s, 256);
        DevCase d256 = upload_case(b, s256, dg.args.w);
        GemmArgs a256 = d256.args;
        a256.y = nullptr;
        a256.w2 = du.args.w;
        a256.y3 = y3;
        a256.ldy3 = s.ldy;
        if (a2) b.gemm(ws256a_fn(type), unsigned((c.N + 63) / 64), d256.gy, WS_THREADS, ws256a_smem(type), a256);
        else b.gemm(ws256_fn(type), unsigned((c.N + 63) / 64), d256.gy, WS_THREADS, ws256_smem(type), a256);
    } else if (ws) {
        b.gemm(ws_fn(type), unsigned((c.N + 63) / 64), dg.gy, WS_THREADS, ws_smem(type), a);
    } else {
        b.gemm(gated_fn(type, bt), unsigned((c.N + 63) / 64), dg.gy, GEMM_THREADS, dg.smem, a);
    }
    const std::vector<float> got = b.download(y3, ny), w = b.download(want, ny);
    long long bad = 0, unwritten = 0;
    for (int r = 0; r < s.M; r++)
        for (int64_t j = 0; j < s.ldy; j++) {
            const size_t i = size_t(r) * size_t(s.ldy) + size_t(j);
            if (j >= c.N) {
                bad += !std::isnan(got[i]);  // padding stays poisoned
                continue;
            }
            unwritten += std::isnan(got[i]);
            bad += std::memcmp(&got[i], &w[i], 4) != 0;
        }
    std::printf("  %s gated %-5s %s%-3d%s tokens=%-5d E=%-3d N=%d K=%d: %lld of %lld outputs differ (%lld unwritten)\n",
                bad ? "FAIL" : "ok  ", ref::type_name(type), ws ? "gs" : "g", ws == 256 ? 256 : bt, a2 ? "a" : "", tokens, c.E, c.N, c.K, bad,
                static_cast<long long>(s.M) * c.N, unwritten);
    b.release();
    return bad ? 1 : 0;
}
