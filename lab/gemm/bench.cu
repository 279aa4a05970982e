// GEMM lab: checks every kernel of gemm.cu, moe.cu and quant.cuh against float64 / bit-exact
// host references, then times the model's shapes. See README.md.
// Build (repository root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
//        lab/gemm/bench.cu -o /tmp/gemm_bench
// Run: /tmp/gemm_bench [--no-time] [--only-time]   (exit code 1 if any check fails)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include "gemm.cu"
#include "moe.cu"
#include "cases.h"

#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__,       \
                        cudaGetErrorString(e_));                                                        \
            std::fflush(stdout);                                                                        \
            std::exit(2);                                                                               \
        }                                                                                               \
    } while (0)

// silu(g) * u, elementwise: the engine's binary map (elementwise.cu BIN_SWIGLU) expression.
__global__ void silu_mul_kernel(const float* g, const float* u, float* o, i64 n) {
    const i64 i = i64(blockIdx.x) * 256 + threadIdx.x;
    if (i < n) o[i] = tally_silu(g[i]) * u[i];
}

struct CudaBackend {
    std::vector<void*> owned;
    template <class T>
    T* alloc(size_t n) {
        void* p = nullptr;
        // Whole 16-byte vectors, as the engine allocates weights (Win16::issue reads them).
        const size_t bytes = std::max<size_t>((n * sizeof(T) + 15) / 16 * 16, 16);
        CK(cudaMalloc(&p, bytes));
        CK(cudaMemset(p, 0xA5, bytes));  // garbage, not zeros
        owned.push_back(p);
        return static_cast<T*>(p);
    }
    template <class T>
    T* upload(const std::vector<T>& v) {
        T* p = alloc<T>(v.size());
        CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
        return p;
    }
    void poison(float* p, size_t n) { CK(cudaMemset(p, 0xFF, n * sizeof(float))); }  // 0xFFFFFFFF: NaN
    template <class T>
    std::vector<T> download(const T* p, size_t n) {
        std::vector<T> v(n);
        CK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }
    // Every kernel's dynamic-smem limit is raised once at start-up (see main).
    void launch_gemm(GemmFn f, unsigned gx, unsigned gy, int threads, size_t smem, const GemmArgs& a) {
        f<<<dim3(gx, gy, 1), dim3(unsigned(threads), 1, 1), smem>>>(a);
        CK(cudaGetLastError());
    }
    void gemm(GemmFn f, unsigned gx, unsigned gy, int threads, size_t smem, const GemmArgs& a) {
        launch_gemm(f, gx, gy, threads, smem, a);
        CK(cudaDeviceSynchronize());
    }
    void route(const MoeRouteArgs& a, int blocks) {
        if (blocks > 1) moe_route_count<<<blocks, MOE_ROUTE_THREADS>>>(a);
        moe_route<<<blocks, MOE_ROUTE_THREADS>>>(a);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    void dequant(const DequantRowsArgs& a, unsigned gx, unsigned gy) {
        dequant_rows<<<dim3(gx, gy, 1), 256>>>(a);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    void launch_xperm(const XPermArgs& a) {
        x_f16_perm<<<unsigned((int64_t(a.M) * (a.K / 8) + 255) / 256), 256>>>(a);
        CK(cudaGetLastError());
    }
    void xperm(const XPermArgs& a) {
        launch_xperm(a);
        CK(cudaDeviceSynchronize());
    }
    // o = silu(g) * u elementwise (the binary map's SwiGlu expression, tally_silu).
    void launch_silu_mul(const float* g, const float* u, float* o, size_t n) {
        silu_mul_kernel<<<unsigned((n + 255) / 256), 256>>>(g, u, o, i64(n));
        CK(cudaGetLastError());
    }
    void silu_mul(const float* g, const float* u, float* o, size_t n) {
        launch_silu_mul(g, u, o, n);
        CK(cudaDeviceSynchronize());
    }
    void release() {
        for (void* p : owned) CK(cudaFree(p));
        owned.clear();
    }
};

// ---- piece probe on the device ----------------------------------------------------------------
template <int T>
__global__ void piece_probe(const u8* w, i64 rb, int K, int rows, float* dq8, u16* h16, float* parts) {
    const int P = K / 32;
    const int id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= rows * P) return;
    const int r = id / P, p = id % P;
    const u8* row = w + r * rb;
    const int s0 = piece_seg0<T>(p), s1 = piece_seg1<T>(p);
    dequant8<T>(row, s0, dq8 + i64(r) * K + s0);
    dequant8<T>(row, s0 + 8, dq8 + i64(r) * K + s0 + 8);
    dequant8<T>(row, s1, dq8 + i64(r) * K + s1);
    dequant8<T>(row, s1 + 8, dq8 + i64(r) * K + s1 + 8);
    Piece<T> pc;
    pc.issue(row, p);
    uint4 o[4];
    pc.to_f16(p, o);
    u16* hr = h16 + i64(r) * K;
    *reinterpret_cast<uint4*>(hr + s0) = o[0];
    *reinterpret_cast<uint4*>(hr + s0 + 8) = o[1];
    *reinterpret_cast<uint4*>(hr + s1) = o[2];
    *reinterpret_cast<uint4*>(hr + s1 + 8) = o[3];
    float* q = parts + (i64(r) * P + p) * 36;
    float v[32], sc[2], off[2];
    piece_parts<T>(pc, p, v, sc, off);
    for (int i = 0; i < 32; i++) q[i] = v[i];
    q[32] = sc[0];
    q[33] = sc[1];
    q[34] = off[0];
    q[35] = off[1];
}

template <int T>
bool test_pieces(CudaBackend& b, ref::Rng& rng) {
    const int K = 2048, rows = 5, P = K / 32;
    const std::vector<uint8_t> w = ref::random_weights(T, rows, K, rng);
    const u8* dw = b.upload(w);
    float* dq8 = b.alloc<float>(size_t(rows) * K);
    u16* h16 = b.alloc<u16>(size_t(rows) * K);
    float* parts = b.alloc<float>(size_t(rows) * P * 36);
    piece_probe<T><<<(rows * P + 127) / 128, 128>>>(dw, ref::row_bytes(T, K), K, rows, dq8, h16, parts);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    PieceProbe g;
    g.dq8 = b.download(dq8, size_t(rows) * K);
    g.h16 = b.download(h16, size_t(rows) * K);
    g.parts = b.download(parts, size_t(rows) * P * 36);
    const bool pass = check_pieces(T, w, K, rows, g);
    b.release();
    return pass;
}

// ---- timing ------------------------------------------------------------------------------------
struct TimeRow {
    std::string shape, type, best;
    long long M = 0, N = 0, K = 0;
    double ms = 0, tflops = 0, gbps = 0, rel = 0, bytes = 0;
    bool pass = true;
    std::string others;
};
static std::vector<TimeRow> g_rows;
static std::vector<std::string> g_failures;

static double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Back-to-back timing (--decode): launches queued without a host round trip between them.
static bool g_back_to_back = false;

// Median of 20 launches after 3 warm-ups; weight copies rotate so that together they exceed L2.
static double time_launches(CudaBackend& b, GemmFn f, const DevCase& d, const std::vector<const u8*>& wcopies) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    GemmArgs a = d.args;
    // The wgmma tiles' x conversion (x_f16_perm) runs before every launch and is timed with it.
    auto go = [&]() {
        if (d.has_xperm) b.launch_xperm(d.xperm);
        b.launch_gemm(f, d.gx, d.gy, d.threads, d.smem, a);
    };
    for (int i = 0; i < 3; i++) {
        a.w = wcopies[size_t(i) % wcopies.size()];
        go();
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> ts;
    if (g_back_to_back) {
        // Five rounds of 20 launches between two events: the per-launch time as a CUDA graph
        // sees it (no host launch latency in the measurement); median of the rounds.
        for (int r = 0; r < 5; r++) {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < 20; i++) {
                a.w = wcopies[size_t(i + 3) % wcopies.size()];
                go();
            }
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            ts.push_back(ms / 20);
        }
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        b.release();
        return median(ts);
    }
    for (int i = 0; i < 20; i++) {
        a.w = wcopies[size_t(i + 3) % wcopies.size()];
        CK(cudaEventRecord(e0));
        go();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(ts);
}

// Median of 20 calls of go() after 3 warm-ups, each timed alone between two events (the launches
// go() queues, synchronised after each call).
template <class F>
static double time_calls(F&& go) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(e0));
        go();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) ts.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(ts);
}

// The wgmma tiles' x conversion alone (median of 20 launches).
static double time_xperm(CudaBackend& b, const DevCase& d) {
    return time_calls([&] { b.launch_xperm(d.xperm); });
}

// Weights are generated once per (type, rows, K) and reused across M and variants.
static std::map<std::string, std::vector<uint8_t>> g_wcache;
static const std::vector<uint8_t>& cached_weights(int type, int64_t rows, int K, ref::Rng& rng) {
    const std::string key = std::to_string(type) + "/" + std::to_string(rows) + "/" + std::to_string(K);
    auto it = g_wcache.find(key);
    if (it == g_wcache.end()) it = g_wcache.emplace(key, ref::random_weights(type, rows, K, rng)).first;
    return it->second;
}

// Times one shape over the given variants; checks each variant's output on sampled rows.
static void time_shape(CudaBackend& b, const char* shape, GemmCase c, const std::vector<int>& variants, ref::Rng& rng) {
    c.check_rows = 24;
    c.check_cols = 512;
    const bool moe = c.E > 0;
    const int64_t wrows = int64_t(moe ? c.E : 1) * c.N;
    const std::vector<uint8_t>& w = cached_weights(c.type, wrows, c.K, rng);
    TimeRow best;
    best.ms = 1e30;
    std::string others;
    std::vector<float> x;  // generated by the first variant's setup, reused by the others
    for (int v : variants) {
        if (variant_smem(c.type, v) > 232448) continue;  // does not fit (x128 of Q6_K, F32)
        c.variant = v;
        Setup s = make_setup(c, rng, &w, x.empty() ? nullptr : &x);
        if (x.empty()) x = s.x;
        // Weight copies (device-to-device) so that the rotation exceeds L2.
        const double wbytes = double(w.size());
        const int copies = int(std::min(8.0, std::max(1.0, std::ceil(160e6 / wbytes))));
        std::vector<const u8*> wc;
        const u8* w0 = b.upload(s.w);
        wc.push_back(w0);
        for (int i = 1; i < copies; i++) {
            u8* p = b.alloc<u8>(w.size());
            CK(cudaMemcpy(p, w0, w.size(), cudaMemcpyDeviceToDevice));
            wc.push_back(p);
        }
        DevCase d = upload_case(b, s, w0);
        if (v == V_GEMVT || v == V_GEMVT2 || v == V_GEMVT4) {
            if (d.smem > 232448 || s.rb % 16 != 0) continue;
            CK(cudaFuncSetAttribute(gemm_fn(c.type, v), cudaFuncAttributeMaxDynamicSharedMemorySize, int(d.smem)));
        }
        b.poison(d.y, d.y_elems);
        b.gemm(gemm_fn(c.type, v), d.gx, d.gy, d.threads, d.smem, d.args);
        const std::vector<float> y = b.download(d.y, d.y_elems);
        char name[96];
        std::snprintf(name, sizeof(name), "%s", shape);
        c.name = name;
        s.c.name = name;
        const CaseResult cr = check_case(s, y, true);
        if (!cr.pass) {
            char f[200];
            std::snprintf(f, sizeof(f), "timing-shape check %s %s %s M=%d rel=%.3e nonfinite=%lld unwritten=%lld", shape,
                          ref::type_name(c.type), variant_name(v), s.M, cr.rel, (long long)cr.nonfinite, (long long)cr.unwritten);
            g_failures.push_back(f);
        }
        const double xperm_ms = d.has_xperm ? time_xperm(b, d) : 0.0;
        const double ms = time_launches(b, gemm_fn(c.type, v), d, wc);
        // Bytes the op needs: weights of the experts it touches (all of W for dense), x, y.
        double wneed = wbytes;
        if (moe) {
            int touched = 0;
            for (int e = 0; e < c.E; e++) touched += s.routing.counts[size_t(e)] > 0;
            wneed = double(touched) * double(s.rb) * c.N;
        }
        const double bytes = wneed + 4.0 * s.x_rows * c.K + 4.0 * double(s.M) * c.N;
        const double flops = 2.0 * s.M * double(c.N) * c.K;
        char o[48];
        std::snprintf(o, sizeof(o), "%s %.4f%s ", variant_name(v), ms, cr.pass ? "" : "!");
        others += o;
        if (ms < best.ms) {
            best.ms = ms;
            best.best = variant_name(v);
            best.tflops = flops / (ms * 1e-3) / 1e12;
            best.gbps = bytes / (ms * 1e-3) / 1e9;
            best.rel = cr.rel;
            best.bytes = bytes;
            best.pass = cr.pass;
        }
        std::printf("  time %-22s %-5s %-4s M=%-6d N=%-6d K=%-5d %9.4f ms %7.1f TFLOP/s %7.0f GB/s (needs %.1f MB) rel=%.2e%s",
                    shape, ref::type_name(c.type), variant_name(v), s.M, c.N, c.K, ms, flops / (ms * 1e-3) / 1e12,
                    bytes / (ms * 1e-3) / 1e9, bytes / 1e6, cr.rel, cr.pass ? "" : " CHECK FAILED");
        if (d.has_xperm) std::printf(" (x_f16_perm alone %.4f ms)", xperm_ms);
        std::printf("\n");
        std::fflush(stdout);
        b.release();
    }
    best.shape = shape;
    best.type = ref::type_name(c.type);
    best.M = moe ? int64_t(c.M) * c.topk : c.M;
    best.N = c.N;
    best.K = c.K;
    best.others = others;
    g_rows.push_back(best);
}

// The 35B model's routed-expert projections at T tokens (256 experts, top 8) in weight type t,
// each variant of `variants`: the gate/up (2048 -> 512; when `gate_up`) and the down (512 ->
// 2048, one x row per pair).
static void time_moe_shapes(CudaBackend& b, int T, int t, bool gate_up, const std::vector<int>& variants, ref::Rng& rng) {
    GemmCase c;
    c.E = 256;
    c.topk = 8;
    c.M = T;
    c.type = t;
    if (gate_up) {
        c.N = 512;
        c.K = 2048;
        std::vector<int> long_k;  // the x-resident tiles take K <= their K_MAX only
        for (int v : variants)
            if (!variant_wgx(v) || variant_kmax(v) >= c.K) long_k.push_back(v);
        time_shape(b, "moe gate/up", c, long_k, rng);
    }
    c.pair_input = true;
    c.N = 2048;
    c.K = 512;
    time_shape(b, "moe down", c, variants, rng);
}

// One routing (both launches) of T random tokens; chunk 0: one block, else the engine's rule
// (ops/moe.rs route_grid: at least 1,024 pairs a block, at most 128 blocks).
static double time_route(CudaBackend& b, int T, int k, int E, int bm, ref::Rng& rng, bool blocks_rule) {
    const std::vector<int32_t> ids = ref::route_random(T, k, E, rng);
    const int P = T * k, mt = (P + bm - 1) / bm + E;
    MoeRouteArgs a{};
    a.chunk = blocks_rule ? std::max(1024, (P + 127) / 128) : P;
    const int blocks = (P + a.chunk - 1) / a.chunk;
    a.bcount = blocks > 1 ? b.alloc<i32>(size_t(blocks) * size_t(E + 1)) : nullptr;
    a.ids = b.upload(ids);
    a.n_tokens = T;
    a.k = k;
    a.n_expert = E;
    a.bm = bm;
    a.max_tiles = mt;
    a.counts = b.alloc<i32>(size_t(E));
    a.sorted_rows = b.alloc<i32>(size_t(P));
    a.tile_expert = b.alloc<i32>(size_t(mt));
    a.tile_start = b.alloc<i32>(size_t(mt));
    a.tile_rows = b.alloc<i32>(size_t(mt));
    a.err = b.alloc<i32>(2);
    const double ms = time_calls([&] {
        if (blocks > 1) moe_route_count<<<blocks, MOE_ROUTE_THREADS>>>(a);
        moe_route<<<blocks, MOE_ROUTE_THREADS>>>(a);
        CK(cudaGetLastError());
    });
    b.release();
    return ms;
}

// The correctness matrix's cases that `keep` selects (every type, full check): each failure goes
// to g_failures; returns (cases run, cases failed).
template <class Keep>
static std::pair<int, int> check_matrix(CudaBackend& b, ref::Rng& rng, Keep keep, bool quiet_pass) {
    int n = 0, nf = 0;
    for (const GemmCase& c : correctness_cases(false)) {
        if (!keep(c)) continue;
        const CaseResult r = run_case(b, c, rng, quiet_pass);
        n++;
        if (!r.pass) {
            nf++;
            char f[200];
            std::snprintf(f, sizeof(f), "correctness %s %s %s rel=%.3e nonfinite=%lld unwritten=%lld padding_written=%lld",
                          c.name.c_str(), ref::type_name(c.type), variant_name(c.variant), r.rel, (long long)r.nonfinite,
                          (long long)r.unwritten, (long long)r.poison_bad);
            g_failures.push_back(f);
        }
    }
    return {n, nf};
}

// --gated: the gated gate/up tile (one launch: x conversion, gemm_<t>_g<BT>) against what the
// engine runs without it (the x conversion and gemm_<t>_w<BT> for the gate, again for the up, the
// SwiGlu), the 35B shape at T tokens (256 experts, top 8, 512 x 2048); median of 20 after 3
// warm-ups, all launches of one side between two events. Routing is not timed (the unfused side
// routes twice in the engine).
static void time_gated(CudaBackend& b, int type, int variant, int T, ref::Rng& rng, int K = 2048) {
    GemmCase c;
    c.type = type;
    c.variant = variant;
    c.M = T;
    c.topk = 8;
    c.E = 256;
    c.N = 512;
    c.K = K;
    const Setup s = make_setup(c, rng, &cached_weights(type, int64_t(c.E) * c.N, c.K, rng));
    Setup su = s;
    su.w = ref::random_weights(type, int64_t(c.E) * c.N, c.K, rng);
    DevCase dg = upload_case(b, s), du = upload_case(b, su);
    float* h = b.alloc<float>(dg.y_elems);
    float* y3 = b.alloc<float>(dg.y_elems);
    GemmArgs a = dg.args;
    a.y = nullptr;
    a.w2 = du.args.w;
    a.y3 = y3;
    a.ldy3 = s.ldy;
    const int bt = variant_bm(variant);
    const GemmFn f = gemm_fn(type, variant), fg = gated_fn(type, bt);
    auto unfused = [&]() {
        b.launch_xperm(dg.xperm);
        b.launch_gemm(f, dg.gx, dg.gy, dg.threads, dg.smem, dg.args);
        b.launch_xperm(du.xperm);
        b.launch_gemm(f, du.gx, du.gy, du.threads, du.smem, du.args);
        b.launch_silu_mul(dg.y, du.y, h, dg.y_elems);
    };
    auto gated = [&]() {
        b.launch_xperm(dg.xperm);
        b.launch_gemm(fg, unsigned((c.N + 63) / 64), dg.gy, GEMM_THREADS, dg.smem, a);
    };
    const double tu = time_calls(unfused), tg = time_calls(gated);
    // Weight bytes of the two projections (every expert is hit at these T).
    const double wbytes = 2.0 * c.E * c.N * (double(ref::row_bytes(type, c.K)));
    std::printf("  time gated %-5s g%-3d T=%-5d K=%-5d unfused (2 x (x_f16_perm + w%d) + SwiGlu) %.4f ms, gated %.4f ms (%.2fx), "
                "%.0f GB/s of weights\n",
                ref::type_name(type), bt, T, K, bt, tu, tg, tu / tg, wbytes / tg * 1e-6);
    if (type == ref::Q4_K && bt == 32) {  // the g32 ablations (gemm_wg_body's ABL)
        const std::pair<int, GemmFn> abl[] = {{1, gemm_q4_k_g32_abl1},   {2, gemm_q4_k_g32_abl2},
                                              {3, gemm_q4_k_g32_abl3},   {4, gemm_q4_k_g32_abl4},
                                              {16, gemm_q4_k_g32_abl16}, {20, gemm_q4_k_g32_abl20},
                                              {23, gemm_q4_k_g32_abl23}, {32, gemm_q4_k_g32_abl32},
                                              {52, gemm_q4_k_g32_abl52}};
        for (const auto& ab : abl) {
            const int m = ab.first;
            const GemmFn fa = ab.second;
            CK(cudaFuncSetAttribute(fa, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dg.smem)));
            const double ta = time_calls([&]() {
                b.launch_xperm(dg.xperm);
                b.launch_gemm(fa, unsigned((c.N + 63) / 64), dg.gy, GEMM_THREADS, dg.smem, a);
            });
            std::printf("  time gated q4_k  g32  T=%-5d K=%-5d ablation %2d (1 no x copies, 2 no weight copies, 4 no decode, "
                        "16 no MMAs, 32 contiguous weight copies) %.4f ms, %.0f GB/s of weights\n",
                        T, K, m, ta, wbytes / ta * 1e-6);
        }
    }
    if (bt == 128 && ws_smem(type) <= 232448) {  // the warp-specialised gs128 on the same case
        auto ws = [&]() {
            b.launch_xperm(dg.xperm);
            b.launch_gemm(ws_fn(type), unsigned((c.N + 63) / 64), dg.gy, WS_THREADS, ws_smem(type), a);
        };
        const double tw = time_calls(ws);
        std::printf("  time gated %-5s gs128 T=%-5d gated g128 %.4f ms, warp-specialised gs128 %.4f ms (%.2fx)\n",
                    ref::type_name(type), T, tg, tw, tg / tw);
        if (ws256_fn(type) && ws256_smem(type) <= 232448) {  // and its 256-row form, 256-row tables
            DevCase d256 = upload_case(b, with_tile_rows(s, 256), dg.args.w);
            GemmArgs a256 = a;
            a256.sorted_rows = d256.args.sorted_rows;
            a256.tile_expert = d256.args.tile_expert;
            a256.tile_start = d256.args.tile_start;
            a256.tile_rows = d256.args.tile_rows;
            const XPermArgs xp256 = d256.xperm;
            a256.xh = xp256.out;
            const double t2 = time_calls([&]() {
                b.launch_xperm(xp256);
                b.launch_gemm(ws256_fn(type), unsigned((c.N + 63) / 64), d256.gy, WS_THREADS, ws256_smem(type), a256);
            });
            std::printf("  time gated %-5s gs256 T=%-5d warp-specialised gs128 %.4f ms, gs256 %.4f ms (%.2fx), "
                        "%.0f GB/s of weights\n",
                        ref::type_name(type), T, tw, t2, tw / t2, wbytes / t2 * 1e-6);
        }
    }
    std::fflush(stdout);
    b.release();
}

int main(int argc, char** argv) {
    if (const RecordedRouting& r = recorded_routing(); r.T > 0)
        std::printf("routing: MoE cases of %d tokens x top-%d of %d experts take %s (recorded), not a "
                    "uniform table\n", r.T, r.k, r.E, r.path.c_str());
    bool do_check = true, do_time = true;
    // --decode: the GEMV kernels only (gemv_<t>, mmv_<t>): their correctness cases, then the
    // decode shapes of the 35B model, one x row (and 2, 4, 8 for speculative verification).
    bool decode_only = false;
    // --head (with --decode): only the output head's timings (1-4 x rows), no checks.
    bool head_only = false;
    // --moe: timings of the routed-expert shapes only, every type of the downloaded mixes
    // (issue 10's per-byte comparison at the kernel level), no correctness matrix.
    bool moe_only = false;
    // --wg: the wgmma tiles (gemm_<t>_w32/_w64/_w128): their correctness cases (every type),
    // then the prefill shapes of the 35B model at 512 and 8192 tokens (MoE and dense) against
    // the tiles the engine runs there today.
    bool wg_only = false;
    // --route: moe_route only: its cases (one block and several), then its timings.
    bool route_only = false;
    // --gated: the gated gate/up tiles: bit-equality with two unfused launches and the SwiGlu
    // (every type, both heights; then the 35B shape), then their timings (time_gated).
    bool gated_only = false;
    // --router: the f32 GEMMs of F32 weights (gemm_f32_simt, _simt_m32 and the 3xTF32
    // gemm_f32_tf32, _tf32_m32): their correctness cases (bound kSimtBound against float64), then the
    // router's shape (N = 256, K = 2048) at 512, 2048 and 8192 tokens.
    bool router_only = false;
    std::string moe_type;  // --only TYPE: that type at T = 512 only (one kernel to profile)
    for (int i = 1; i < argc; i++) {
        const std::string s = argv[i];
        if (s == "--only" && i + 1 < argc) moe_type = argv[++i];
        if (s == "--no-time") do_time = false;
        if (s == "--only-time") do_check = false;
        if (s == "--decode") decode_only = true;
        if (s == "--head") head_only = decode_only = true, do_check = false;
        if (s == "--moe") moe_only = true;
        if (s == "--wg") wg_only = true;
        if (s == "--route") route_only = true;
        if (s == "--gated") gated_only = true;
        if (s == "--router") router_only = true;
    }
    const auto t_start = std::chrono::steady_clock::now();
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MB, smem/block opt-in %zu KB, cc %d.%d\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10, prop.major, prop.minor);
    if (route_only) {
        CudaBackend b;
        ref::Rng rng(20260101);
        const int fails = run_route_cases(b, rng, true);
        for (int T : {512, 8192, 32768}) {
            const int bm = T == 512 ? 32 : 128;
            const double one = time_route(b, T, 8, 256, bm, rng, false), many = time_route(b, T, 8, 256, bm, rng, true);
            std::printf("  moe_route: T=%-5d one block %.4f ms, engine's blocks %.4f ms\n", T, one, many);
        }
        std::printf("%s: %d failing route cases\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    {
        // Resource usage of the kernels (what the compiler gave them).
        for (int t : ref::ALL_TYPES) {
            std::printf("  regs %-5s:", ref::type_name(t));
            for (int v = 0; v < N_VARIANTS; v++) {
                cudaFuncAttributes fa;
                CK(cudaFuncGetAttributes(&fa, gemm_fn(t, v)));
                int blocks = 0;
                CK(cudaFuncSetAttribute(gemm_fn(t, v), cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem(t, v))));
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_fn(t, v), v == V_GEMV || v == V_GEMV4 ? GEMV_THREADS : GEMM_THREADS,
                                                                 variant_smem(t, v)));
                std::printf(" %s %d regs %zu B local %d blk/SM;", variant_name(v), fa.numRegs, fa.localSizeBytes, blocks);
            }
            for (int v : {V_S16, V_S32, V_W32, V_W64, V_W128, V_X64, V_X96, V_X128, V_X32G, V_X32, V_XS128}) {
                if (variant_smem(t, v) > 232448) continue;
                cudaFuncAttributes fa;
                CK(cudaFuncGetAttributes(&fa, gemm_fn(t, v)));
                int blocks = 0;
                CK(cudaFuncSetAttribute(gemm_fn(t, v), cudaFuncAttributeMaxDynamicSharedMemorySize, int(variant_smem(t, v))));
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_fn(t, v), GEMM_THREADS, variant_smem(t, v)));
                std::printf(" %s %d regs %zu B local %d blk/SM;", variant_name(v), fa.numRegs, fa.localSizeBytes, blocks);
            }
            std::printf("\n");
        }
        std::printf("  regs simt :");
        for (int v : {V_SIMT, V_SIMT_M32, V_TF32, V_TF32_M32}) {
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, gemm_fn(ref::F32, v)));
            int blocks = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_fn(ref::F32, v), SIMT_THREADS, 0));
            std::printf(" %s %d regs %zu B local %zu B smem %d blk/SM;", variant_name(v), fa.numRegs, fa.localSizeBytes,
                        fa.sharedSizeBytes, blocks);
        }
        std::printf("\n");
    }
    CudaBackend b;
    ref::Rng rng(7);
    int fails = 0;
    if (router_only) {
        for (int v : {V_SIMT, V_SIMT_M32, V_TF32, V_TF32_M32}) {
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, gemm_fn(ref::F32, v)));
            std::printf("  %s: %d regs, %zu B local\n", variant_name(v), fa.numRegs, fa.localSizeBytes);
        }
        if (do_check)
            for (const GemmCase& c : simt_cases()) fails += !run_case(b, c, rng, true).pass;
        if (do_time && fails == 0)
            for (int M : {512, 2048, 8192}) {
                GemmCase c;
                c.type = ref::F32;
                c.M = M;
                c.N = 256;
                c.K = 2048;
                time_shape(b, "router", c, {V_SIMT, V_SIMT_M32, V_TF32, V_TF32_M32}, rng);
            }
        fails += int(g_failures.size());  // the timing shapes' own checks
        std::printf("%s: %d failing f32 GEMM cases\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    if (gated_only) {
        for (int t : ref::ALL_TYPES)
            for (int v : {V_W32, V_W128}) {
                if (variant_smem(t, v) > 232448) continue;
                CK(cudaFuncSetAttribute(gated_fn(t, variant_bm(v)), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(variant_smem(t, v))));
            }
        for (int t : ref::ALL_TYPES)
            if (ws_smem(t) <= 232448)
                CK(cudaFuncSetAttribute(ws_fn(t), cudaFuncAttributeMaxDynamicSharedMemorySize, int(ws_smem(t))));
        for (int t : ref::ALL_TYPES)
            if (ws256_fn(t) && ws256_smem(t) <= 232448)
                CK(cudaFuncSetAttribute(ws256_fn(t), cudaFuncAttributeMaxDynamicSharedMemorySize, int(ws256_smem(t))));
        if (do_check) {
            std::printf("== gated gate/up tiles: bit-equal to two unfused launches and the SwiGlu\n");
            for (int t : ref::ALL_TYPES)
                for (int v : {V_W32, V_W128})
                    for (int tokens : {29, 70}) fails += check_gated(b, t, v, tokens, 200, 512, false, rng);
            for (int t : {ref::Q4_K, ref::Q5_K, ref::MXFP4, ref::IQ4_XS, ref::Q8_0})
                for (auto [v, T] : {std::pair{V_W32, 512}, std::pair{V_W128, 8192}})
                    fails += check_gated(b, t, v, T, 512, 2048, true, rng);
            // The warp-specialised gs128: every type whose stages fit, then the 35B shape.
            for (int t : ref::ALL_TYPES)
                if (ws_smem(t) <= 232448)
                    for (int tokens : {29, 70, 300}) fails += check_gated(b, t, V_W128, tokens, 200, 512, false, rng, 128);
            for (int t : {ref::Q4_K, ref::MXFP4, ref::IQ4_XS})
                for (int T : {512, 8192}) fails += check_gated(b, t, V_W128, T, 512, 2048, true, rng, 128);
            // gs256: small cases (one half, two, a remainder), then the 35B shape.
            for (int t : {ref::Q4_K, ref::MXFP4, ref::IQ4_XS, ref::Q4_0}) {
                if (ws256_smem(t) > 232448) continue;
                for (int tokens : {70, 700, 1100}) fails += check_gated(b, t, V_W128, tokens, 200, 512, false, rng, 256);
                for (int T : {2048, 8192}) fails += check_gated(b, t, V_W128, T, 512, 2048, true, rng, 256);
            }
        }
        if (do_time && fails == 0)
            for (int T : {512, 2048, 4096, 8192})
                for (int t : {ref::Q4_K, ref::Q5_K, ref::MXFP4, ref::IQ4_XS, ref::Q8_0, ref::F16}) {
                    if (!moe_type.empty() && moe_type != ref::type_name(t)) continue;
                    if (t == ref::F16 && moe_type.empty()) continue;  // --only f16
                    for (int v : {V_W32, V_W128}) time_gated(b, t, v, T, rng);
                    // The same 512 tokens with 4x the K: longer blocks, the same pipeline ramp.
                    if (T == 512 && t == ref::Q4_K) time_gated(b, t, V_W32, T, rng, 8192);
                }
        std::printf("%s: %d failing gated cases\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    if (wg_only) {
        int nf = 0;
        if (do_check) {
            std::printf("== wgmma tiles: correctness (every type)\n");
            const auto [n, failed] = check_matrix(b, rng, [](const GemmCase& c) { return variant_wg(c.variant); }, false);
            nf = failed;
            std::printf("  %d cases, %d failed\n", n, nf);
        }
        if (do_time && nf == 0) {
            const std::vector<int> moe_v = {V_M64, V_M32, V_S32, V_W32, V_W128, V_X64, V_X96, V_X128, V_X32G, V_X32, V_XS128};
            for (int T : {512, 2048, 8192}) {
                for (int t : {ref::Q4_K, ref::Q6_K, ref::Q8_0, ref::IQ4_XS, ref::MXFP4, ref::Q5_K, ref::F16}) {
                    if (!moe_type.empty() && moe_type != ref::type_name(t)) continue;
                    if (t == ref::F16 && moe_type.empty()) continue;  // --only f16: an f16 copy's tiles
                    if (T > 512 && moe_type.empty() && t != ref::Q4_K && t != ref::Q6_K) continue;
                    time_moe_shapes(b, T, t, t != ref::Q6_K, moe_v, rng);
                }
                g_wcache.clear();
            }
            struct D {
                const char* name;
                int N, K, type;
            };
            const D ds[] = {{"dense qkv", 8192, 2048, ref::Q4_K}, {"dense qkv", 8192, 2048, ref::Q6_K},
                            {"dense z-gate", 4096, 2048, ref::Q4_K}, {"dense out", 2048, 4096, ref::Q4_K},
                            {"dense beta/alpha", 32, 2048, ref::Q4_K}, {"dense shexp g/u", 512, 2048, ref::Q4_K},
                            {"dense q", 8192, 2048, ref::Q8_0}};
            for (int M : {512, 8192}) {
                for (const D& d : ds) {
                    if (!moe_type.empty() && moe_type != ref::type_name(d.type)) continue;
                    GemmCase c;
                    c.type = d.type;
                    c.M = M;
                    c.N = d.N;
                    c.K = d.K;
                    time_shape(b, d.name, c, {V_M128, V_M64, V_W64, V_W128}, rng);
                }
                g_wcache.clear();
            }
        }
        std::printf("\n== SUMMARY (wgmma tiles)\n");
        for (size_t i = 0; i < g_failures.size() && i < 40; i++) std::printf("  FAIL %s\n", g_failures[i].c_str());
        std::printf("%-16s %-6s %6s %5s %5s | %-4s %8s %6s %6s | all variants (ms)\n", "shape", "type", "M", "N", "K", "best", "ms",
                    "TFLOP/s", "GB/s");
        for (const TimeRow& r : g_rows)
            std::printf("%-16s %-6s %6lld %5lld %5lld | %-4s %8.4f %6.1f %6.0f | %s\n", r.shape.c_str(), r.type.c_str(), r.M, r.N, r.K,
                        r.best.c_str(), r.ms, r.tflops, r.gbps, r.others.c_str());
        return g_failures.empty() ? 0 : 1;
    }
    if (moe_only) {
        const std::vector<int> tc = {V_M128, V_M64, V_M32, V_S16, V_S32};
        for (int T : {512, 8192}) {
            for (int t : {ref::Q4_K, ref::Q5_K, ref::Q6_K, ref::Q8_0, ref::IQ4_XS, ref::MXFP4}) {
                if (T == 8192 && t != ref::Q4_K && t != ref::Q8_0) continue;
                if (!moe_type.empty() && (moe_type != ref::type_name(t) || T != 512)) continue;
                time_moe_shapes(b, T, t, true, tc, rng);
            }
            g_wcache.clear();
        }
        std::printf("\n== SUMMARY (moe; us/MB = best ms per MB the op needs, x1000)\n");
        for (size_t i = 0; i < g_failures.size() && i < 30; i++) std::printf("  FAIL %s\n", g_failures[i].c_str());
        std::printf("%-14s %-6s %6s %5s %5s | %-4s %8s %6s %6s %7s | all variants (ms)\n", "shape", "type", "pairs", "N", "K", "best",
                    "ms", "GB/s", "us/MB", "MB");
        for (const TimeRow& r : g_rows)
            std::printf("%-14s %-6s %6lld %5lld %5lld | %-4s %8.4f %6.0f %6.3f %7.1f | %s\n", r.shape.c_str(), r.type.c_str(), r.M, r.N,
                        r.K, r.best.c_str(), r.ms, r.gbps, 1e3 * r.ms / (r.bytes / 1e6), r.bytes / 1e6, r.others.c_str());
        return g_failures.empty() ? 0 : 1;
    }
    if (decode_only) {
        mmv_max_blocks = 3;
        if (do_check) {
            std::printf("== gemv / mmv correctness (every type)\n");
            const auto [n, nf] = check_matrix(
                b, rng, [](const GemmCase& c) { return c.variant == V_GEMV || c.variant == V_MMV || c.variant == V_GEMV4; },
                true);
            std::printf("  %d cases, %d failed\n", n, nf);
        }
        mmv_max_blocks = 4 * prop.multiProcessorCount;
        g_back_to_back = true;
        if (do_time) {
            struct D {
                const char* name;
                int N, K, type;
            };
            const D ds[] = {{"decode qkv", 8192, 2048, ref::Q4_K},     {"decode qkv", 8192, 2048, ref::Q6_K},
                            {"decode z-gate", 4096, 2048, ref::Q4_K},  {"decode out", 2048, 4096, ref::Q4_K},
                            {"decode k/v", 512, 2048, ref::Q4_K},      {"decode beta/alpha", 32, 2048, ref::Q4_K},
                            {"decode shexp g/u", 512, 2048, ref::Q4_K}, {"decode shexp down", 2048, 512, ref::Q6_K},
                            {"decode q", 8192, 2048, ref::Q8_0},       {"decode q", 8192, 2048, ref::Q5_K},
                            {"decode q", 8192, 2048, ref::BF16},       {"decode q", 8192, 2048, ref::IQ4_XS},
                            {"decode q", 8192, 2048, ref::MXFP4},      {"decode q", 8192, 2048, ref::IQ4_NL},
                            {"output head", 248320, 2048, ref::Q6_K}};
            gemvr_blocks = 2 * prop.multiProcessorCount;
            for (int M : {1, 4}) {
                for (const D& d : ds) {
                    if (head_only && d.N != 248320) continue;
                    GemmCase c;
                    c.type = d.type;
                    c.M = M;
                    c.N = d.N;
                    c.K = d.K;
                    std::vector<int> vs = {V_GEMV, V_GEMV4, V_MMV};
                    if (d.type != ref::BF16) vs.push_back(M == 1 ? V_GEMVR : V_GEMVR4);
                    if (d.type != ref::BF16 && M == 1) vs.insert(vs.end(), {V_GEMVT, V_GEMVT2});
                    if (d.type != ref::BF16 && M > 1) vs.push_back(V_GEMVT4);
                    time_shape(b, d.name, c, vs, rng);
                }
            }
            for (int M : {2, 3}) {  // verification batches of k = 1, 2 on the head
                GemmCase c;
                c.type = ref::Q6_K;
                c.M = M;
                c.N = 248320;
                c.K = 2048;
                time_shape(b, "output head", c, {V_GEMV4, V_GEMVR4, V_GEMVT4}, rng);
            }
            if (head_only) goto summary;
            GemmCase c;
            c.E = 256;
            c.topk = 8;
            c.M = 1;
            // Per byte read, every expert format of the mixes against Q4_K (issue 10 item 5).
            for (bool tight : {false, true}) {
                c.tile_rows1 = tight;
                for (int t : {ref::Q4_K, ref::IQ4_XS, ref::MXFP4, ref::IQ4_NL, ref::Q8_0, ref::Q6_K}) {
                    c.type = t;
                    if (t != ref::Q6_K) {
                        c.pair_input = false;
                        c.N = 512;
                        c.K = 2048;
                        time_shape(b, tight ? "dec moe g/u 1-row" : "decode moe gate/up", c, {V_GEMV, V_MMV}, rng);
                    }
                    c.pair_input = true;
                    c.N = 2048;
                    c.K = 512;
                    time_shape(b, tight ? "dec moe down 1-row" : "decode moe down", c, {V_GEMV, V_MMV}, rng);
                }
            }
        }
    summary:
        std::printf("\n== SUMMARY (decode)\n");
        for (size_t i = 0; i < g_failures.size() && i < 30; i++) std::printf("  FAIL %s\n", g_failures[i].c_str());
        std::printf("%-20s %-5s %6s %6s %5s | %-4s %9s %6s %8s | all variants (ms)\n", "shape", "type", "M", "N", "K", "best",
                    "ms", "GB/s", "rel err");
        for (const TimeRow& r : g_rows)
            std::printf("%-20s %-5s %6lld %6lld %5lld | %-4s %9.4f %6.0f %8.1e | %s\n", r.shape.c_str(), r.type.c_str(), r.M, r.N,
                        r.K, r.best.c_str(), r.ms, r.gbps, r.rel, r.others.c_str());
        return g_failures.empty() ? 0 : 1;
    }
    if (do_check) {
        auto note = [&](bool ok, const std::string& what) {
            if (!ok) {
                fails++;
                g_failures.push_back(what);
            }
        };
        std::printf("== pieces and dequant8 (device kernel, K=2048)\n");
        note(test_pieces<QT_Q4_K>(b, rng), "pieces q4_k");
        note(test_pieces<QT_Q5_K>(b, rng), "pieces q5_k");
        note(test_pieces<QT_Q6_K>(b, rng), "pieces q6_k");
        note(test_pieces<QT_Q8_0>(b, rng), "pieces q8_0");
        note(test_pieces<QT_BF16>(b, rng), "pieces bf16");
        note(test_pieces<QT_F16>(b, rng), "pieces f16");
        note(test_pieces<QT_F32>(b, rng), "pieces f32");
        note(test_pieces<QT_Q4_0>(b, rng), "pieces q4_0");
        note(test_pieces<QT_Q4_1>(b, rng), "pieces q4_1");
        note(test_pieces<QT_Q5_0>(b, rng), "pieces q5_0");
        note(test_pieces<QT_Q5_1>(b, rng), "pieces q5_1");
        note(test_pieces<QT_IQ4_NL>(b, rng), "pieces iq4_nl");
        note(test_pieces<QT_IQ4_XS>(b, rng), "pieces iq4_xs");
        note(test_pieces<QT_MXFP4>(b, rng), "pieces mxfp4");
        note(test_pieces<QT_Q2_K>(b, rng), "pieces q2_k");
        note(test_pieces<QT_Q3_K>(b, rng), "pieces q3_k");
        std::printf("== dequant_rows\n");
        for (int t : ref::ALL_TYPES) note(run_dequant_rows_case(b, t, rng), std::string("dequant_rows ") + ref::type_name(t));
        std::printf("== moe_route\n");
        const int route_fails = run_route_cases(b, rng, true);
        note(route_fails == 0, "moe_route: " + std::to_string(route_fails) + " failing cases (see above)");
        std::printf("== gemm / gemv correctness matrix (every type x variant; full check)\n");
        auto [n, nf] = check_matrix(b, rng, [](const GemmCase&) { return true; }, true);
        std::printf("== f32 SIMT gemm (F32 weights, dense; bound %.0e)\n", kSimtBound);
        for (const GemmCase& c : simt_cases()) {
            const CaseResult r = run_case(b, c, rng, false);
            n++;
            if (!r.pass) {
                nf++;
                char f[200];
                std::snprintf(f, sizeof(f), "correctness %s %s rel=%.3e nonfinite=%lld unwritten=%lld padding_written=%lld",
                              c.name.c_str(), variant_name(c.variant), r.rel, (long long)r.nonfinite, (long long)r.unwritten,
                              (long long)r.poison_bad);
                g_failures.push_back(f);
            }
        }
        fails += nf;  // each already listed in g_failures
        std::printf("  %d cases, %d failed\n", n, nf);
        std::fflush(stdout);
    }
    if (do_time) {
        std::printf("== timings (median of 20 after 3 warm-ups; weights rotate over copies > L2)\n");
        const std::vector<int> tc = {V_M128, V_M64, V_M32};
        struct Dense {
            const char* name;
            int N, K, type;
        };
        const Dense dense[] = {{"qkv", 8192, 2048, ref::Q4_K},     {"qkv", 8192, 2048, ref::Q6_K},
                               {"z-gate", 4096, 2048, ref::Q4_K},  {"attn/ssm out", 2048, 4096, ref::Q4_K},
                               {"k/v", 512, 2048, ref::Q4_K},      {"k/v", 512, 2048, ref::Q6_K},
                               {"beta/alpha", 32, 2048, ref::Q4_K}, {"shexp gate/up", 512, 2048, ref::Q4_K},
                               {"shexp down", 2048, 512, ref::Q6_K}, {"router", 256, 2048, ref::F32}};
        for (int M : {512, 2048, 8192}) {
            for (const Dense& d : dense) {
                GemmCase c;
                c.type = d.type;
                c.M = M;
                c.N = d.N;
                c.K = d.K;
                std::vector<int> vs = tc;
                if (d.N <= 32) vs.push_back(V_GEMV);  // tiny N: one x row per block may win
                time_shape(b, d.name, c, vs, rng);
                // The f32 routers the engine runs for F32 weights: the SIMT tiles and 3xTF32.
                if (d.type == ref::F32) time_shape(b, "router f32", c, {V_SIMT, V_SIMT_M32, V_TF32, V_TF32_M32}, rng);
            }
        }
        // MoE: 256 experts, top-8; gate/up (one x row per token), down (one per pair).
        for (int T : {512, 2048, 8192}) {
            GemmCase c;
            c.E = 256;
            c.topk = 8;
            c.M = T;
            c.type = ref::Q4_K;
            c.N = 512;
            c.K = 2048;
            time_shape(b, "moe gate/up", c, tc, rng);
            c.pair_input = true;
            c.N = 2048;
            c.K = 512;
            time_shape(b, "moe down", c, tc, rng);
            c.type = ref::Q6_K;
            time_shape(b, "moe down", c, tc, rng);
        }
        {
            GemmCase c;
            c.E = 256;
            c.topk = 8;
            c.M = 512;
            c.first_k = true;
            c.type = ref::Q4_K;
            c.N = 512;
            c.K = 2048;
            time_shape(b, "moe gate/up first-k", c, tc, rng);
        }
        // Decode / last-token shapes.
        for (int M : {1, 2, 4, 8}) {
            GemmCase c;
            c.type = ref::Q4_K;
            c.M = M;
            c.N = 8192;
            c.K = 2048;
            time_shape(b, "decode qkv", c, {V_GEMV, V_M32}, rng);
            c.N = 2048;
            c.K = 4096;
            time_shape(b, "decode out", c, {V_GEMV, V_M32}, rng);
        }
        for (int M : {1, 8}) {
            GemmCase c;
            c.type = ref::Q6_K;
            c.M = M;
            c.N = 248320;
            c.K = 2048;
            time_shape(b, "output head", c, {V_GEMV, V_M32}, rng);
        }
        {
            GemmCase c;
            c.E = 256;
            c.topk = 8;
            c.M = 1;
            c.type = ref::Q4_K;
            c.N = 512;
            c.K = 2048;
            time_shape(b, "decode moe gate/up", c, {V_GEMV, V_M32}, rng);
            c.pair_input = true;
            c.N = 2048;
            c.K = 512;
            c.type = ref::Q6_K;
            time_shape(b, "decode moe down", c, {V_GEMV, V_M32}, rng);
        }
        for (int T : {512, 8192, 32768}) {
            const int bm = T == 512 ? 32 : 128;
            const double one = time_route(b, T, 8, 256, bm, rng, false), many = time_route(b, T, 8, 256, bm, rng, true);
            std::printf("  moe_route: T=%-5d one block %.4f ms, engine's blocks %.4f ms\n", T, one, many);
        }
        g_wcache.clear();
    }

    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("\n== SUMMARY (%.1f s)\n", secs);
    if (do_check) std::printf("correctness: %s (%d failing checks)\n", fails ? "FAILED" : "all passed", fails);
    // At most 30 lines here, so that the table below stays within a short output tail.
    for (size_t i = 0; i < g_failures.size() && i < 30; i++) std::printf("  FAIL %s\n", g_failures[i].c_str());
    if (g_failures.size() > 30) std::printf("  ... and %zu more failures (see the log above)\n", g_failures.size() - 30);
    if (do_time) {
        std::printf("%-20s %-5s %6s %6s %5s | %-4s %9s %7s %6s %8s | all variants (ms; ! = check failed)\n", "shape", "type", "M",
                    "N", "K", "best", "ms", "TFLOP/s", "GB/s", "rel err");
        for (const TimeRow& r : g_rows) {
            std::printf("%-20s %-5s %6lld %6lld %5lld | %-4s %9.4f %7.1f %6.0f %8.1e | %s\n", r.shape.c_str(), r.type.c_str(), r.M, r.N,
                        r.K, r.best.c_str(), r.ms, r.tflops, r.gbps, r.rel, r.others.c_str());
        }
    }
    return g_failures.empty() ? 0 : 1;
}
