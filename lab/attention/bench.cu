// Lab harness for crates/engine/src/cuda/kernels/attention.cu: checks every kernel variant against a
// double-precision CPU reference of Op::Attention, then times the model's shapes.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
//          lab/attention/bench.cu -o /tmp/attn_bench
// Run:   /tmp/attn_bench [--quick]      (exit code 0 iff every check passed)
#include "attention.cu"
#include "variants.cu"  // the variants the engine does not load

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static char g_ctx[256] = "start";  // what was running, printed with any CUDA error
#define CK(x) ck((x), #x, __FILE__, __LINE__)
static void ck(cudaError_t e, const char* what, const char* file, int line) {
    if (e != cudaSuccess) {
        std::printf("CUDA error %s (%s) at %s:%d: %s\n  while: %s\n", cudaGetErrorName(e), cudaGetErrorString(e),
                    file, line, what, g_ctx);
        std::fflush(stdout);
        std::exit(2);
    }
}

static const double kBound = 5e-3;  // relative error bound, f16 operands
static const float kSentinel = 7777.0f;

// ---------------------------------------------------------------------------------------------
// Kernels

// WG: flash_attn_wg_d256 (attention_wg.cuh, the serial form; d = 256 only, outside the per-d
// arrays); WGP: its pipelined form (flash_attn_wg_pipe_d256, variants.cu).
enum Kind { P8 = 0, P4, H8, H4, DEC, NKIND, WG, WGP };
typedef void (*KFn)(AttnArgs);
static KFn kfn[NKIND][4] = {
    {flash_attn_d32, flash_attn_d64, flash_attn_d128, flash_attn_d256},
    {flash_attn_w4_d32, flash_attn_w4_d64, flash_attn_w4_d128, flash_attn_w4_d256},
    {flash_attn_h_d32, flash_attn_h_d64, flash_attn_h_d128, flash_attn_h_d256},
    {flash_attn_h_w4_d32, flash_attn_h_w4_d64, flash_attn_h_w4_d128, flash_attn_h_w4_d256},
    {flash_decode_d32, flash_decode_d64, flash_decode_d128, flash_decode_d256},
};
static const char* kfn_name[NKIND][4] = {
    {"flash_attn_d32", "flash_attn_d64", "flash_attn_d128", "flash_attn_d256"},
    {"flash_attn_w4_d32", "flash_attn_w4_d64", "flash_attn_w4_d128", "flash_attn_w4_d256"},
    {"flash_attn_h_d32", "flash_attn_h_d64", "flash_attn_h_d128", "flash_attn_h_d256"},
    {"flash_attn_h_w4_d32", "flash_attn_h_w4_d64", "flash_attn_h_w4_d128", "flash_attn_h_w4_d256"},
    {"flash_decode_d32", "flash_decode_d64", "flash_decode_d128", "flash_decode_d256"},
};
static int dix(int d) { return d == 32 ? 0 : d == 64 ? 1 : d == 128 ? 2 : 3; }
static int nwarps(Kind k) { return (k == P8 || k == H8) ? 8 : 4; }
static bool is_f16(Kind k) { return k == H8 || k == H4; }
static int smem_bytes(Kind k, int d) {
    if (k == DEC) return 0;
    const int nw = nwarps(k);
    const bool h = is_f16(k);
    return ATTN_SMEM_BYTES(d, nw, h);
}

struct Dev {
    cudaDeviceProp prop;
    int n_sm;
    int occ[NKIND][4];  // resident blocks per SM
};
static Dev dev;

static void init_device() {
    CK(cudaGetDeviceProperties(&dev.prop, 0));
    dev.n_sm = dev.prop.multiProcessorCount;
    std::printf("device: %s, %d SMs, L2 %d MB, smem/block opt-in %zu KB, cc %d.%d\n", dev.prop.name, dev.n_sm,
                dev.prop.l2CacheSize >> 20, dev.prop.sharedMemPerBlockOptin >> 10, dev.prop.major, dev.prop.minor);
    std::printf("%-24s %5s %6s %8s %8s %6s %10s\n", "kernel", "regs", "local", "smem_st", "smem_dyn", "block", "blocks/SM");
    for (int k = 0; k < NKIND; ++k)
        for (int i = 0; i < 4; ++i) {
            const int d = 32 << i, sm = smem_bytes(Kind(k), d), threads = k == DEC ? 256 : 32 * nwarps(Kind(k));
            if (sm > 0) CK(cudaFuncSetAttribute(kfn[k][i], cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
            cudaFuncAttributes fa;
            CK(cudaFuncGetAttributes(&fa, kfn[k][i]));
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&dev.occ[k][i], kfn[k][i], threads, sm));
            std::printf("%-24s %5d %6zu %8zu %8d %6d %10d\n", kfn_name[k][i], fa.numRegs, fa.localSizeBytes,
                        fa.sharedSizeBytes, sm, threads, dev.occ[k][i]);
            if (dev.occ[k][i] < 1) {
                std::printf("FATAL: %s cannot be resident\n", kfn_name[k][i]);
                std::exit(2);
            }
        }
    for (int w = 0; w < 2; ++w) {
        KFn f = w ? flash_attn_wg_pipe_d256 : flash_attn_wg_d256;
        const char* name = w ? "flash_attn_wg_pipe_d256" : "flash_attn_wg_d256";
        const int sm = ATTN_WG_SMEM_BYTES(256);
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, f));
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, 256, sm));
        std::printf("%-24s %5d %6zu %8zu %8d %6d %10d\n", name, fa.numRegs, fa.localSizeBytes, fa.sharedSizeBytes, sm, 256, occ);
        if (occ < 1) {
            std::printf("FATAL: %s cannot be resident\n", name);
            std::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Problems

struct Problem {
    int R, P, H, Hkv, d, q_offset;
    long long ldq, ldk, ldv, ldo;
    float scale;
    std::vector<float> q, k, v;  // host, [R, ldq], [P, ldk], [P, ldv]
    int pvis() const { return q_offset + R; }
    int rows() const { return R * (H / Hkv); }
    double flops() const {  // 4 * H * d * sum over rows of visible keys
        double keys = 0;
        for (int r = 0; r < R; ++r) keys += q_offset + r + 1;
        return 4.0 * H * d * keys;
    }
    double bytes() const { return 4.0 * ((double)R * H * d * 2 + (double)pvis() * Hkv * d * 2); }
};

struct Rng {
    unsigned long long s;
    explicit Rng(unsigned long long seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    unsigned long long next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    double uni() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
    double normal() { return std::sqrt(-2.0 * std::log(uni())) * std::cos(6.283185307179586 * uni()); }
};

// q and k rows are RMS-normalised per head and scaled by a per-dimension gain (as q_norm/k_norm
// weights do), so scores are peaked like a trained model's; v ~ N(0, 1). K/V rows at and after
// q_offset + R (outside every query's view) and padding columns are NaN: reading them shows.
static void fill(Problem& p, unsigned long long seed) {
    Rng g(seed);
    const float nan = std::nanf("");
    std::vector<float> gq(p.d), gk(p.d);
    for (int c = 0; c < p.d; ++c) {
        gq[c] = 0.5f + 2.5f * (float)g.uni();
        gk[c] = 0.5f + 2.5f * (float)g.uni();
    }
    auto rms_rows = [&](std::vector<float>& x, int rows, long long ld, int heads, const std::vector<float>& gain) {
        x.assign((size_t)rows * ld, nan);
        for (int r = 0; r < rows; ++r)
            for (int h = 0; h < heads; ++h) {
                float* y = &x[(size_t)r * ld + (size_t)h * p.d];
                double ss = 0;
                for (int c = 0; c < p.d; ++c) {
                    y[c] = (float)g.normal();
                    ss += (double)y[c] * y[c];
                }
                const float inv = (float)(1.0 / std::sqrt(ss / p.d + 1e-6));
                for (int c = 0; c < p.d; ++c) y[c] = y[c] * inv * gain[c];
            }
    };
    rms_rows(p.q, p.R, p.ldq, p.H, gq);
    rms_rows(p.k, p.pvis(), p.ldk, p.Hkv, gk);
    p.v.assign((size_t)p.pvis() * p.ldv, nan);
    for (int r = 0; r < p.pvis(); ++r)
        for (int c = 0; c < p.Hkv * p.d; ++c) p.v[(size_t)r * p.ldv + c] = (float)g.normal();
    p.k.resize((size_t)p.P * p.ldk, nan);
    p.v.resize((size_t)p.P * p.ldv, nan);
}

static Problem make(int R, int P_extra, int H, int Hkv, int d, int q_offset, int ld_pad, unsigned long long seed) {
    Problem p;
    p.R = R;
    p.H = H;
    p.Hkv = Hkv;
    p.d = d;
    p.q_offset = q_offset;
    p.P = q_offset + R + P_extra;
    p.ldq = (long long)H * d + ld_pad;
    p.ldo = (long long)H * d + ld_pad;
    p.ldk = (long long)Hkv * d + ld_pad;
    p.ldv = (long long)Hkv * d + ld_pad;
    p.scale = (float)(1.0 / std::sqrt((double)d));
    fill(p, seed);
    return p;
}

// Double-precision reference for the listed query rows: out[(i * H + h) * d + c].
static void reference(const Problem& p, const std::vector<int>& rows, std::vector<double>& out) {
    out.assign(rows.size() * p.H * p.d, 0.0);
    const int G = p.H / p.Hkv;
    const size_t jobs = rows.size() * p.H;
    const unsigned nth = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
    auto work = [&](unsigned t) {
        std::vector<double> s, acc(p.d);
        for (size_t job = t; job < jobs; job += nth) {
            const int i = (int)(job / p.H), h = (int)(job % p.H), r = rows[i], kvh = h / G;
            const int n = p.q_offset + r + 1;
            s.resize(n);
            const float* q = &p.q[(size_t)r * p.ldq + (size_t)h * p.d];
            double mx = -INFINITY;
            for (int j = 0; j < n; ++j) {
                const float* k = &p.k[(size_t)j * p.ldk + (size_t)kvh * p.d];
                double dot = 0;
                for (int c = 0; c < p.d; ++c) dot += (double)q[c] * k[c];
                s[j] = dot * p.scale;
                mx = std::max(mx, s[j]);
            }
            double sum = 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int j = 0; j < n; ++j) {
                const double e = std::exp(s[j] - mx);
                sum += e;
                const float* v = &p.v[(size_t)j * p.ldv + (size_t)kvh * p.d];
                for (int c = 0; c < p.d; ++c) acc[c] += e * v[c];
            }
            for (int c = 0; c < p.d; ++c) out[job * p.d + c] = acc[c] / sum;
        }
    };
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nth; ++t) th.emplace_back(work, t);
    for (auto& x : th) x.join();
}

// ---------------------------------------------------------------------------------------------
// Device buffers and launches

static int round64(long long x) { return (int)((x + 63) / 64 * 64); }

struct DevBuf {
    float *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *ws = nullptr;
    __half *k16 = nullptr, *v16 = nullptr;
    size_t o_elems = 0, ws_elems = 0, h_elems = 0;
    static const size_t kGuard = 256;  // sentinel floats after o
};

static void upload(const Problem& p, DevBuf& b) {
    CK(cudaMalloc(&b.q, p.q.size() * 4));
    CK(cudaMalloc(&b.k, p.k.size() * 4));
    CK(cudaMalloc(&b.v, p.v.size() * 4));
    CK(cudaMemcpy(b.q, p.q.data(), p.q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.k, p.k.data(), p.k.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.v, p.v.data(), p.v.size() * 4, cudaMemcpyHostToDevice));
    b.o_elems = (size_t)p.R * p.ldo;
    CK(cudaMalloc(&b.o, (b.o_elems + DevBuf::kGuard) * 4));
    // The f16 copies: rows of K / V, or V transposed with rows of round64(P) keys (WG).
    b.h_elems = std::max((size_t)p.pvis() * p.Hkv * p.d, (size_t)p.Hkv * p.d * round64(p.P));
    CK(cudaMalloc(&b.k16, b.h_elems * 2));
    CK(cudaMalloc(&b.v16, b.h_elems * 2));
}
static void release(DevBuf& b) {
    cudaFree(b.q);
    cudaFree(b.k);
    cudaFree(b.v);
    cudaFree(b.o);
    cudaFree(b.ws);
    cudaFree(b.k16);
    cudaFree(b.v16);
    b = DevBuf();
}

struct Launch {
    Kind kind;
    int n_split, kv_chunk;
};


// The recommended host plan (mirrored in the header comment of attention.cu).
static Launch plan(const Problem& p, Kind prefill_kind) {
    const int pv = p.pvis();
    if (p.rows() <= ATTN_DEC_MAXQ) {
        const int target = std::max(1, dev.n_sm * dev.occ[DEC][dix(p.d)] / p.Hkv);
        const int chunk = round64((pv + target - 1) / target);
        return {DEC, (pv + chunk - 1) / chunk, chunk};
    }
    const int bm = 16 * nwarps(prefill_kind);
    const int blocks = (p.rows() + bm - 1) / bm * p.Hkv;
    if (blocks * 4 >= dev.n_sm) return {prefill_kind, 1, 64};
    const int target = (dev.n_sm + blocks - 1) / blocks;
    const int chunk = round64((pv + target - 1) / target);
    return {prefill_kind, (pv + chunk - 1) / chunk, chunk};
}

static AttnArgs args_for(const Problem& p, const DevBuf& b, const Launch& L, const float* q, const float* k,
                         const float* v) {
    AttnArgs a;
    std::memset(&a, 0, sizeof a);
    a.q = q;
    a.ldq = p.ldq;
    a.k = k;
    a.ldk = p.ldk;
    a.v = v;
    a.ldv = p.ldv;
    a.o = b.o;
    a.ldo = p.ldo;
    a.R = p.R;
    a.P = p.P;
    a.H = p.H;
    a.Hkv = p.Hkv;
    a.d = p.d;
    a.q_offset = p.q_offset;
    a.scale = p.scale;
    a.n_split = L.n_split;
    a.kv_chunk = L.kv_chunk;
    a.ws = b.ws;
    a.k16 = b.k16;  // read by flash_attn_h_*, written by attn_kv_to_f16
    a.v16 = b.v16;
    a.ld16 = (long long)p.Hkv * p.d;
    a.ldvt = (L.kind == WG || L.kind == WGP) ? round64(p.P) : 0;  // attn_kv_to_f16 writes V transposed for WG
    return a;
}

static void ensure_ws(DevBuf& b, const Problem& p, const Launch& L) {
    const size_t need = L.n_split > 1 ? (size_t)L.n_split * p.R * p.H * (p.d + 2) : 1;
    if (need > b.ws_elems) {
        cudaFree(b.ws);
        CK(cudaMalloc(&b.ws, need * 4));
        b.ws_elems = need;
    }
}

static void launch(const Problem& p, const AttnArgs& a, const Launch& L, cudaStream_t st) {
    const int di = dix(p.d);
    if (L.kind == WG || L.kind == WGP) {
        const long long n8 = (long long)std::min(p.P, p.pvis()) * p.Hkv * p.d / 8;
        attn_kv_to_f16<<<dim3((unsigned)((n8 + 255) / 256), 2), 256, 0, st>>>(a);
        CK(cudaGetLastError());
        (L.kind == WG ? flash_attn_wg_d256 : flash_attn_wg_pipe_d256)<<<dim3((p.rows() + ATTN_WG_BM - 1) / ATTN_WG_BM, p.Hkv), 256, ATTN_WG_SMEM_BYTES(256), st>>>(a);
        CK(cudaGetLastError());
        return;
    }
    if (is_f16(L.kind)) {
        const long long n8 = (long long)std::min(p.P, p.pvis()) * p.Hkv * p.d / 8;
        attn_kv_to_f16<<<dim3((unsigned)((n8 + 255) / 256), 2), 256, 0, st>>>(a);
        CK(cudaGetLastError());
    }
    if (L.kind == DEC) {
        kfn[DEC][di]<<<dim3(L.n_split, p.Hkv), 256, 0, st>>>(a);
    } else {
        const int bm = 16 * nwarps(L.kind);
        kfn[L.kind][di]<<<dim3((p.rows() + bm - 1) / bm, p.Hkv, L.n_split), 32 * nwarps(L.kind),
                          smem_bytes(L.kind, p.d), st>>>(a);
    }
    CK(cudaGetLastError());
    if (L.n_split > 1) {
        flash_attn_combine<<<(unsigned)((long long)p.R * p.H), ATTN_COMBINE_THREADS, 0, st>>>(a);
        CK(cudaGetLastError());
    }
}

// NaN in o's data columns, the sentinel in padding columns and the guard after it; NaN in ws and
// the f16 copies, so that a missing write or a read of something never written shows.
static void poison(const Problem& p, DevBuf& b) {
    std::vector<float> h(b.o_elems + DevBuf::kGuard, kSentinel);
    for (int r = 0; r < p.R; ++r)
        for (int c = 0; c < p.H * p.d; ++c) h[(size_t)r * p.ldo + c] = std::nanf("");
    CK(cudaMemcpy(b.o, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(b.ws, 0xff, b.ws_elems * 4));
    CK(cudaMemset(b.k16, 0xff, b.h_elems * 2));
    CK(cudaMemset(b.v16, 0xff, b.h_elems * 2));
}

struct Check {
    double rel = INFINITY, max_abs = 0;
    long long nonfinite = 0, clobbered = 0;
    int worst_r = -1, worst_h = -1, worst_c = -1;
    float worst_got = 0;
    double worst_ref = 0;
    bool ok() const { return nonfinite == 0 && clobbered == 0 && rel < kBound; }
};

static Check compare(const Problem& p, const std::vector<float>& got, const std::vector<int>& rows,
                     const std::vector<double>& ref) {
    Check c;
    for (int r = 0; r < p.R; ++r)
        for (long long j = 0; j < p.ldo; ++j) {
            const float x = got[(size_t)r * p.ldo + j];
            if (j < (long long)p.H * p.d) {
                if (!std::isfinite(x)) ++c.nonfinite;
            } else if (x != kSentinel) {
                ++c.clobbered;
            }
        }
    for (size_t j = (size_t)p.R * p.ldo; j < got.size(); ++j)
        if (got[j] != kSentinel) ++c.clobbered;
    double num = 0, den = 0;
    for (size_t i = 0; i < rows.size(); ++i)
        for (int h = 0; h < p.H; ++h)
            for (int col = 0; col < p.d; ++col) {
                const double rf = ref[(i * p.H + h) * p.d + col];
                const float x = got[(size_t)rows[i] * p.ldo + (size_t)h * p.d + col];
                const double e = std::isfinite(x) ? std::fabs(x - rf) : INFINITY;
                num += e * e;
                den += rf * rf;
                if (!(e <= c.max_abs)) {
                    c.max_abs = e;
                    c.worst_r = rows[i];
                    c.worst_h = h;
                    c.worst_c = col;
                    c.worst_got = x;
                    c.worst_ref = rf;
                }
            }
    c.rel = std::sqrt(num / den);
    return c;
}

static std::vector<float> run_once(const Problem& p, DevBuf& b, const Launch& L) {
    ensure_ws(b, p, L);
    poison(p, b);
    const AttnArgs a = args_for(p, b, L, b.q, b.k, b.v);
    launch(p, a, L, 0);
    CK(cudaDeviceSynchronize());
    std::vector<float> got(b.o_elems + DevBuf::kGuard);
    CK(cudaMemcpy(got.data(), b.o, got.size() * 4, cudaMemcpyDeviceToHost));
    return got;
}

// ---------------------------------------------------------------------------------------------
// Correctness

static int g_fail = 0, g_checks = 0;

static std::string describe(const Problem& p) {
    char s[160];
    std::snprintf(s, sizeof s, "d%-3d R%-4d q_offset %-5d P %-5d H%d/Hkv%d ld+%lld", p.d, p.R, p.q_offset, p.P, p.H, p.Hkv,
                  p.ldq - (long long)p.H * p.d);
    return s;
}

static void check_problem(Problem& p, bool verbose) {
    std::vector<int> rows(p.R);
    for (int r = 0; r < p.R; ++r) rows[r] = r;
    std::vector<double> ref;
    reference(p, rows, ref);
    DevBuf b;
    upload(p, b);
    std::vector<std::pair<std::string, Launch>> vs = {
        {"f32-w8", {P8, 1, 64}},
        {"f32-w4", {P4, 1, 64}},
        {"f16-w8", {H8, 1, 64}},
        {"f16-w4", {H4, 1, 64}},
        {"f32-w8 split3x64", {P8, 3, 64}},  // the last split takes all keys after 128
        {"f16-w4 split4", {H4, 4, round64((p.pvis() + 3) / 4)}},
        {"f32-w4 split7x64", {P4, 7, 64}},
        {"auto", plan(p, P8)},
    };
    if (p.d == 256 && p.rows() > ATTN_DEC_MAXQ) {
        vs.push_back({"wg", {WG, 1, 64}});
        vs.push_back({"wg-pipe", {WGP, 1, 64}});
    }
    if (p.rows() <= ATTN_DEC_MAXQ) {
        vs.push_back({"decode 1", {DEC, 1, 64}});
        vs.push_back({"decode split2x64", {DEC, 2, 64}});
        vs.push_back({"decode split5", {DEC, 5, round64((p.pvis() + 4) / 5)}});
    }
    double worst = 0;
    std::string worst_name;
    for (auto& nv : vs) {
        std::snprintf(g_ctx, sizeof g_ctx, "check %s | %s n_split %d chunk %d", describe(p).c_str(), nv.first.c_str(),
                      nv.second.n_split, nv.second.kv_chunk);
        const auto got1 = run_once(p, b, nv.second);
        const auto got2 = run_once(p, b, nv.second);
        const Check c = compare(p, got1, rows, ref);
        long long diff = 0;
        for (size_t i = 0; i < got1.size(); ++i)
            if (std::memcmp(&got1[i], &got2[i], 4) != 0) ++diff;
        ++g_checks;
        const bool ok = c.ok() && diff == 0;
        if (c.rel > worst || !ok) {
            worst = std::max(worst, c.rel);
            worst_name = nv.first;
        }
        if (!ok || verbose) {
            if (!ok) ++g_fail;
            std::printf("%s %s | %-18s n_split %d chunk %d: rel %.3e nonfinite %lld clobbered %lld run-to-run diffs %lld"
                        " | worst r%d h%d c%d got %.6g ref %.6g\n",
                        ok ? "ok  " : "FAIL", describe(p).c_str(), nv.first.c_str(), nv.second.n_split,
                        nv.second.kv_chunk, c.rel, c.nonfinite, c.clobbered, diff, c.worst_r, c.worst_h, c.worst_c,
                        c.worst_got, c.worst_ref);
            if (!ok && c.worst_r >= 0) {  // per-head error of the worst row
                std::printf("       row %d per-head rel err:", c.worst_r);
                for (int h = 0; h < p.H; ++h) {
                    double n = 0, dd = 0;
                    for (int col = 0; col < p.d; ++col) {
                        const double rf = ref[((size_t)c.worst_r * p.H + h) * p.d + col];
                        const double x = got1[(size_t)c.worst_r * p.ldo + (size_t)h * p.d + col];
                        n += (x - rf) * (x - rf);
                        dd += rf * rf;
                    }
                    std::printf(" %.1e", std::sqrt(n / dd));
                }
                std::printf("\n");
            }
        }
    }
    if (!verbose)
        std::printf("%s %s | %zu variants, worst rel %.3e (%s)\n", worst < kBound ? "ok  " : "FAIL", describe(p).c_str(),
                    vs.size(), worst, worst_name.c_str());
    release(b);
}

// ---------------------------------------------------------------------------------------------
// Timing

struct TimeRow {
    std::string shape, variant;
    Launch L;
    double ms_med, ms_min, tflops, gbps, rel;
};

static void time_problem(Problem& p, const char* shape, std::vector<TimeRow>& out, bool quick) {
    // Sampled rows for the error column: 48 spread over R, plus the last.
    std::vector<int> rows;
    const int ns = std::min(p.R, 48);
    for (int i = 0; i < ns; ++i) rows.push_back((int)((long long)i * p.R / ns));
    if (rows.back() != p.R - 1) rows.push_back(p.R - 1);
    std::vector<double> ref;
    reference(p, rows, ref);

    DevBuf b;
    upload(p, b);
    // Extra input sets so that the timed runs do not find the inputs in L2 (at least 2 x L2 in all).
    const double set_bytes = 4.0 * (p.q.size() + p.k.size() + p.v.size());
    const int nset = std::max(1, std::min(8, (int)std::ceil(2.0 * dev.prop.l2CacheSize / set_bytes)));
    std::vector<float*> qs{b.q}, ks{b.k}, vs_{b.v};
    for (int s = 1; s < nset; ++s) {
        float *q, *k, *v;
        CK(cudaMalloc(&q, p.q.size() * 4));
        CK(cudaMalloc(&k, p.k.size() * 4));
        CK(cudaMalloc(&v, p.v.size() * 4));
        CK(cudaMemcpy(q, b.q, p.q.size() * 4, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(k, b.k, p.k.size() * 4, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(v, b.v, p.v.size() * 4, cudaMemcpyDeviceToDevice));
        qs.push_back(q);
        ks.push_back(k);
        vs_.push_back(v);
    }
    std::vector<std::pair<std::string, Launch>> vars;
    if (p.rows() <= ATTN_DEC_MAXQ) {
        vars = {{"decode auto", plan(p, P8)}, {"decode 1 split", {DEC, 1, 64}}, {"f32-w8 split", plan(p, P8)}};
        vars[2].second = {P8, vars[0].second.n_split, vars[0].second.kv_chunk};
    } else {
        vars = {{"f32-w8", {P8, 1, 64}}, {"f32-w4", {P4, 1, 64}}, {"f16-w8 +cvt", {H8, 1, 64}},
                {"f16-w4 +cvt", {H4, 1, 64}}};
        if (p.R <= 2048) vars.push_back({"f32-w8 split2", {P8, 2, round64((p.pvis() + 1) / 2)}});
        if (p.R <= 2048) vars.push_back({"f32-w4 split2", {P4, 2, round64((p.pvis() + 1) / 2)}});
        vars.push_back({"auto", plan(p, P8)});
        if (p.R > 8192) vars = {{"f16-w4 +cvt", {H4, 1, 64}}};  // long shapes: the engine's kernel and WG only
        vars.push_back({"wg +cvt", {WG, 1, 64}});
        vars.push_back({"wg-pipe +cvt", {WGP, 1, 64}});
    }
    const int reps = quick ? 5 : 20, warm = 3;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (auto& nv : vars) {
        const Launch L = nv.second;
        std::snprintf(g_ctx, sizeof g_ctx, "timing %s | %s n_split %d chunk %d", shape, nv.first.c_str(), L.n_split,
                      L.kv_chunk);
        const auto got = run_once(p, b, L);  // correctness on set 0
        const Check c = compare(p, got, rows, ref);
        ++g_checks;
        if (!c.ok()) {
            ++g_fail;
            std::printf("FAIL timing check %s %s: rel %.3e nonfinite %lld clobbered %lld worst r%d h%d c%d got %.6g ref %.6g\n",
                        shape, nv.first.c_str(), c.rel, c.nonfinite, c.clobbered, c.worst_r, c.worst_h, c.worst_c,
                        c.worst_got, c.worst_ref);
        }
        std::vector<float> ms;
        for (int it = 0; it < warm + reps; ++it) {
            const int s = it % nset;
            const AttnArgs a = args_for(p, b, L, qs[s], ks[s], vs_[s]);
            CK(cudaEventRecord(e0));
            launch(p, a, L, 0);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            if (it >= warm) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        TimeRow row{shape, nv.first, L, ms[ms.size() / 2], ms[0], 0, 0, c.rel};
        row.tflops = p.flops() / (row.ms_med * 1e-3) / 1e12;
        row.gbps = p.bytes() / (row.ms_med * 1e-3) / 1e9;
        out.push_back(row);
        std::printf("timed %-8s %-16s n_split %3d: median %.4f ms (min %.4f) %7.1f TFLOP/s %7.1f GB/s rel %.2e\n", shape,
                    nv.first.c_str(), L.n_split, row.ms_med, row.ms_min, row.tflops, row.gbps, c.rel);
    }
    // f32 -> f16 conversion alone (part of the f16 rows above).
    {
        const Launch L{H8, 1, 64};
        std::vector<float> ms;
        for (int it = 0; it < warm + reps; ++it) {
            const int s = it % nset;
            const AttnArgs a = args_for(p, b, L, qs[s], ks[s], vs_[s]);
            const long long n8 = (long long)p.pvis() * p.Hkv * p.d / 8;
            CK(cudaEventRecord(e0));
            attn_kv_to_f16<<<dim3((unsigned)((n8 + 255) / 256), 2), 256>>>(a);
            CK(cudaGetLastError());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            if (it >= warm) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        const double cb = (double)p.pvis() * p.Hkv * p.d * 2 * (4 + 2);
        std::printf("timed %-8s %-16s             median %.4f ms, %.0f GB/s\n", shape, "kv_to_f16 alone", ms[ms.size() / 2],
                    cb / (ms[ms.size() / 2] * 1e-3) / 1e9);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    for (int s = 1; s < nset; ++s) {
        cudaFree(qs[s]);
        cudaFree(ks[s]);
        cudaFree(vs_[s]);
    }
    release(b);
}

int main(int argc, char** argv) {
    bool quick = false, verbose = false, checks = true, timing = true;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--quick")) quick = true;         // fewer shapes and repeats
        else if (!std::strcmp(argv[i], "--verbose")) verbose = true; // one line per variant
        else if (!std::strcmp(argv[i], "--checks-only")) timing = false;
        else if (!std::strcmp(argv[i], "--timing-only")) checks = false;
        else {
            std::printf("usage: %s [--quick] [--verbose] [--checks-only | --timing-only]\n", argv[0]);
            return 2;
        }
    }
    init_device();

    // Correctness: head_dim x R x q_offset x head ratio, then edge cases.
    unsigned long long seed = 1;
    const int ds[] = {32, 64, 128, 256};
    const int Rs[] = {1, 7, 64, 100, 512};
    const int pos0s[] = {0, 37};
    const int ratios[][2] = {{16, 2}, {8, 4}};  // 8:1 (the model), 2:1
    for (int d : ds)
        for (int R : Rs)
            if (checks)
            for (int q0 : pos0s)
                for (auto& hr : ratios) {
                    if (quick && R == 512 && d != 256) continue;
                    Problem p = make(R, /*P_extra*/ q0 ? 19 : 0, hr[0], hr[1], d, q0, /*ld_pad*/ q0 ? 4 : 0, seed++);
                    check_problem(p, verbose);
                }
    struct Edge {
        int R, P_extra, H, Hkv, d, q0, pad;
    };
    const Edge edges[] = {
        {1, 0, 16, 2, 256, 4095, 0},    // decode against a long cache
        {1, 500, 16, 2, 256, 3000, 0},  // P much larger than q_offset + R
        {7, 0, 16, 2, 256, 1000, 4},    // few rows, long cache (prefill kernels split)
        {100, 3, 16, 2, 256, 1500, 0},
        {3, 0, 16, 2, 64, 200, 0},      // 24 packed rows, G = 8
        {33, 0, 16, 16, 64, 5, 0},      // G = 1 (MHA)
        {50, 0, 12, 4, 128, 11, 0},     // G = 3: packed rows straddle tiles unevenly
        {65, 2, 16, 2, 256, 0, 1},      // ld not a multiple of 4: scalar paths
        {9, 0, 16, 2, 32, 1, 3},
        {1, 0, 16, 2, 128, 0, 0},       // one key
    };
    for (const Edge& e : edges) {
        if (!checks) break;
        Problem p = make(e.R, e.P_extra, e.H, e.Hkv, e.d, e.q0, e.pad, seed++);
        check_problem(p, verbose);
    }
    std::printf("correctness: %d checks, %d failed (bound rel < %.0e, no NaN, no write outside o, bitwise repeatable)\n",
                g_checks, g_fail, kBound);

    // Timing: the model's shape (16 query heads, 2 KV heads, head_dim 256, scale 1/16).
    std::vector<TimeRow> rows;
    struct TShape {
        const char* name;
        int R, q0;
    };
    const TShape ts[] = {{"pp512", 512, 0}, {"pp2048", 2048, 0}, {"pp8192", 8192, 0}, {"pp8192@24576", 8192, 24576}, {"pp32768", 32768, 0}, {"tg@64", 1, 63}, {"tg@8192", 1, 8191},
                          {"tg@32768", 1, 32767}};
    for (const TShape& t : ts) {
        if (!timing) break;
        Problem p = make(t.R, 0, 16, 2, 256, t.q0, 0, seed++);
        p.scale = 1.0f / 16.0f;
        time_problem(p, t.name, rows, quick);
    }
    std::printf("\n%-8s %-16s %7s %10s %10s %9s %8s %9s\n", "shape", "variant", "n_split", "ms(med)", "ms(min)",
                "TFLOP/s", "GB/s", "rel_err");
    for (auto& r : rows)
        std::printf("%-8s %-16s %7d %10.4f %10.4f %9.1f %8.1f %9.2e\n", r.shape.c_str(), r.variant.c_str(), r.L.n_split,
                    r.ms_med, r.ms_min, r.tflops, r.gbps, r.rel);
    std::printf("%s: %d checks, %d failed\n", g_fail ? "FAILED" : "ALL CHECKS PASSED", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
