// Lab harness for delta.cu (chunked gated delta rule + token-by-token step) and conv.cu
// (conv_silu, conv_silu_l2norm, delta_gates): checks against float64 CPU references on fresh
// random inputs with NaN-poisoned outputs, then times with CUDA events (median of 20).
//
// Build (from the repository root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
//        lab/delta/bench.cu -o /tmp/delta_bench && /tmp/delta_bench
// Options: --quick (skip T=8192 timing), --no-time, --profile T (one chunked prep + scan at T
// tokens and nothing else, for a profiler). Exit code 1 if any check failed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "delta.cu"
#include "conv.cu"
#include "variants.cu"  // conv_silu_l2norm, which the engine does not load
#include "elementwise.cu"  // delta_gates

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "FATAL CUDA error '%s' at %s:%d in %s (while: %s)\n",                \
                    cudaGetErrorString(e_), __FILE__, __LINE__, #x, g_what.c_str());            \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

static std::string g_what = "setup";
static int g_fail = 0, g_pass = 0;

// Launch check: the launch error, then (in check mode) the kernel's own errors.
static void after_launch(const char* name, bool sync) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "FATAL: kernel %s failed: %s (case: %s)\n", name, cudaGetErrorString(e), g_what.c_str());
        exit(2);
    }
}

// ---------------------------------------------------------------------------------------------
// Random numbers (splitmix64).
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 12345) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double normal() {
        double u1 = uni(), u2 = uni();
        if (u1 < 1e-300) u1 = 1e-300;
        return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
};

static void parallel_for(int n, const std::function<void(int)>& f) {
    int nt = (int)std::max(1u, std::thread::hardware_concurrency());
    nt = std::min(nt, n);
    std::vector<std::thread> th;
    for (int w = 0; w < nt; ++w)
        th.emplace_back([&, w] {
            for (int i = w; i < n; i += nt) f(i);
        });
    for (auto& t : th) t.join();
}

template <class T>
static T* dalloc(size_t n) {
    T* p = nullptr;
    CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}
static void poison(void* p, size_t bytes) { CK(cudaMemset(p, 0xFF, bytes)); }  // NaN in f32 and f16

struct ErrStat {
    double rel = 0, max_abs = 0;
    long long nan = 0, first_nan = -1, arg_max = -1;
};
static ErrStat compare(const float* out, const double* ref, size_t n) {
    ErrStat s;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(out[i])) {
            if (s.first_nan < 0) s.first_nan = (long long)i;
            s.nan++;
            continue;
        }
        const double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > s.max_abs) s.max_abs = fabs(d), s.arg_max = (long long)i;
    }
    s.rel = s.nan ? INFINITY : sqrt(num / std::max(den, 1e-300));
    return s;
}

static void check(bool ok, const char* what) {
    if (ok) g_pass++;
    else {
        g_fail++;
        printf("  FAIL: %s\n", what);
    }
}

// ---------------------------------------------------------------------------------------------
// The delta rule.

struct DeltaShape {
    int Hk, Hv, dk, dv;
};

struct DeltaInputs {
    int T;
    DeltaShape s;
    int ldqkv;                      // q | k | v in one [T, ldqkv] buffer, as the engine lays it out
    std::vector<float> qkv, g, beta, s0;
};

static double l2n(float* x, int n, double scale) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += (double)x[i] * x[i];
    const double f = scale / sqrt(ss + 1e-6);
    for (int i = 0; i < n; ++i) x[i] = (float)(x[i] * f);
    return f;
}

static DeltaInputs make_delta_inputs(int T, DeltaShape s, double gmin, uint64_t seed) {
    Rng r(seed);
    DeltaInputs in;
    in.T = T;
    in.s = s;
    in.ldqkv = 2 * s.Hk * s.dk + s.Hv * s.dv;
    in.qkv.resize((size_t)T * in.ldqkv);
    for (auto& x : in.qkv) x = (float)r.normal();
    for (int t = 0; t < T; ++t) {
        float* row = &in.qkv[(size_t)t * in.ldqkv];
        for (int h = 0; h < s.Hk; ++h) {
            l2n(row + h * s.dk, s.dk, 1.0 / sqrt((double)s.dk));            // q: unit, then 1/sqrt(dk)
            l2n(row + s.Hk * s.dk + h * s.dk, s.dk, 1.0);                   // k: unit
        }
    }
    in.g.resize((size_t)T * s.Hv);
    in.beta.resize((size_t)T * s.Hv);
    for (auto& x : in.g) x = (float)(gmin * r.uni());
    for (auto& x : in.beta) x = (float)(0.02 + 0.96 * r.uni());
    in.s0.resize((size_t)s.Hv * s.dk * s.dv);
    for (auto& x : in.s0) x = (float)(0.5 * r.normal());
    return in;
}

// Sequential float64 reference: o for all T tokens [T][Hv*dv] and the final state.
static void delta_reference(const DeltaInputs& in, std::vector<double>& o, std::vector<double>& sf) {
    const DeltaShape s = in.s;
    const int T = in.T, dk = s.dk, dv = s.dv;
    o.assign((size_t)T * s.Hv * dv, 0.0);
    sf.assign((size_t)s.Hv * dk * dv, 0.0);
    parallel_for(s.Hv, [&](int h) {
        const int kh = h % s.Hk;
        std::vector<double> S(in.s0.begin() + (size_t)h * dk * dv, in.s0.begin() + (size_t)(h + 1) * dk * dv);
        std::vector<double> kv(dv), kd(dk), qd(dk);
        for (int t = 0; t < T; ++t) {
            const float* row = &in.qkv[(size_t)t * in.ldqkv];
            const float* q = row + kh * dk;
            const float* k = row + s.Hk * dk + kh * dk;
            const float* v = row + 2 * s.Hk * dk + h * dv;
            for (int i = 0; i < dk; ++i) kd[i] = k[i], qd[i] = q[i];
            const double dec = exp((double)in.g[(size_t)t * s.Hv + h]);
            const double b = in.beta[(size_t)t * s.Hv + h];
            std::fill(kv.begin(), kv.end(), 0.0);
            for (int i = 0; i < dk; ++i) {
                double* Si = &S[(size_t)i * dv];
                for (int j = 0; j < dv; ++j) {
                    Si[j] *= dec;
                    kv[j] += Si[j] * kd[i];
                }
            }
            for (int j = 0; j < dv; ++j) kv[j] = b * (v[j] - kv[j]);
            double* ot = &o[(size_t)t * s.Hv * dv + (size_t)h * dv];
            for (int i = 0; i < dk; ++i) {
                double* Si = &S[(size_t)i * dv];
                for (int j = 0; j < dv; ++j) {
                    Si[j] += kd[i] * kv[j];
                    ot[j] += Si[j] * qd[i];
                }
            }
        }
        std::copy(S.begin(), S.end(), sf.begin() + (size_t)h * dk * dv);
    });
}

struct DeltaDev {
    float *qkv = nullptr, *g = nullptr, *beta = nullptr, *state = nullptr, *o = nullptr, *work = nullptr;
    size_t work_floats = 0;
    void free_all() {
        cudaFree(qkv), cudaFree(g), cudaFree(beta), cudaFree(state), cudaFree(o), cudaFree(work);
    }
};

static DeltaArgs delta_args(const DeltaInputs& in, const DeltaDev& d, int R) {
    const DeltaShape s = in.s;
    DeltaArgs a{};  // zero: no decode prologue, no per-token snapshots
    a.q = d.qkv + (size_t)(in.T - R) * in.ldqkv;  // rows of the last R tokens
    a.ldq = in.ldqkv;
    a.k = d.qkv + s.Hk * s.dk;
    a.ldk = in.ldqkv;
    a.v = d.qkv + 2 * s.Hk * s.dk;
    a.ldv = in.ldqkv;
    a.g = d.g;
    a.ldg = s.Hv;
    a.beta = d.beta;
    a.ldb = s.Hv;
    a.state = d.state;
    a.o = d.o;
    a.ldo = (i64)s.Hv * s.dv;
    a.work = d.work;
    a.T = in.T, a.R = R, a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    return a;
}

static DeltaDev upload(const DeltaInputs& in) {
    DeltaDev d;
    const DeltaShape s = in.s;
    d.qkv = dalloc<float>(in.qkv.size());
    d.g = dalloc<float>(in.g.size());
    d.beta = dalloc<float>(in.beta.size());
    d.state = dalloc<float>(in.s0.size());
    d.o = dalloc<float>((size_t)in.T * s.Hv * s.dv);
    d.work_floats = (size_t)delta_work_floats(in.T, s.Hk, s.Hv, s.dk, s.dv);
    d.work = dalloc<float>(d.work_floats);
    CK(cudaMemcpy(d.qkv, in.qkv.data(), in.qkv.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.g, in.g.data(), in.g.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.beta, in.beta.data(), in.beta.size() * 4, cudaMemcpyHostToDevice));
    return d;
}

// The scan launch: delta_rule_chunk_scan, or with two (TALLY_DELTA_SCAN=ring) its two-set form.
static void launch_scan(const DeltaArgs& a, bool sync, bool two) {
    if (two) {
        delta_rule_chunk_scan2<<<dim3(a.Hv, a.dv / DELTA_NS), 256, delta_scan_smem_bytes(a.dk, 2)>>>(a);
        after_launch("delta_rule_chunk_scan2", sync);
    } else {
        delta_rule_chunk_scan<<<dim3(a.Hv, a.dv / DELTA_NS), 256, delta_scan_smem_bytes(a.dk)>>>(a);
        after_launch("delta_rule_chunk_scan", sync);
    }
}
static void launch_chunked(const DeltaArgs& a, bool sync, bool two = false) {
    if (a.T == 0) return;
    const int nc = (int)delta_chunks(a.T);
    delta_rule_chunk_prep<<<dim3(nc, a.Hv), 256, delta_prep_smem_bytes(a.dk)>>>(a);
    after_launch("delta_rule_chunk_prep", sync);
    launch_scan(a, sync, two);
}
static void launch_step(const DeltaArgs& a, bool sync) {
    if (a.T == 0) return;
    delta_rule_step<<<dim3(a.Hv, a.dv / DELTA_NS), 128>>>(a);
    after_launch("delta_rule_step", sync);
}

// CPU float64 version of the prep's workspace, compared with what the GPU wrote.
static void diagnose_prep(const DeltaInputs& in, int R, const DeltaDev& d) {
    const DeltaShape s = in.s;
    const int T = in.T, dk = s.dk, dv = s.dv, nc = (int)delta_chunks(T), q0 = T - R;
    std::vector<float> work(d.work_floats);
    CK(cudaMemcpy(work.data(), d.work, d.work_floats * 4, cudaMemcpyDeviceToHost));
    const float* base = work.data();
    const __half* W = (const __half*)base;
    base += (size_t)nc * s.Hv * 32 * dk;
    const __half* P = (const __half*)base;
    base += (size_t)nc * s.Hv * 4096;
    const float* U = base;
    base += (size_t)nc * s.Hv * 64 * dv;
    const float* G = base;
    base += (size_t)nc * s.Hv * 64;
    const __half* KH = (const __half*)base;
    base += (size_t)nc * s.Hk * 32 * dk;
    const __half* QH = (const __half*)base;
    double e[6][2] = {};  // W, U, P, G, K, Q: (err^2, ref^2)
    long long nan[6] = {};
    auto acc = [&](int which, double got, double ref) {
        if (!std::isfinite(got)) { nan[which]++; return; }
        e[which][0] += (got - ref) * (got - ref);
        e[which][1] += ref * ref;
    };
    for (int c = 0; c < nc; ++c) {
        const bool has_out = R > 0 && c * 64 + 64 > q0;
        for (int h = 0; h < s.Hv; ++h) {
            const int kh = h % s.Hk;
            std::vector<double> Gd(64), bd(64), K(64 * dk, 0.0), Q(64 * dk, 0.0), V(64 * dv, 0.0);
            double acc_g = 0;
            for (int i = 0; i < 64; ++i) {
                const int t = c * 64 + i;
                if (t < T) {
                    acc_g += in.g[(size_t)t * s.Hv + h];
                    bd[i] = in.beta[(size_t)t * s.Hv + h];
                    const float* row = &in.qkv[(size_t)t * in.ldqkv];
                    for (int x = 0; x < dk; ++x) K[i * dk + x] = row[s.Hk * dk + kh * dk + x];
                    if (t >= q0)
                        for (int x = 0; x < dk; ++x) Q[i * dk + x] = row[kh * dk + x];
                    for (int x = 0; x < dv; ++x) V[i * dv + x] = row[2 * s.Hk * dk + h * dv + x];
                } else bd[i] = 0;
                Gd[i] = acc_g;
            }
            std::vector<double> A(64 * 64, 0.0), Tm(64 * 64, 0.0);
            for (int i = 0; i < 64; ++i)
                for (int j = 0; j < i; ++j) {
                    double kk = 0;
                    for (int x = 0; x < dk; ++x) kk += K[i * dk + x] * K[j * dk + x];
                    A[i * 64 + j] = bd[i] * kk * exp(Gd[i] - Gd[j]);
                }
            for (int i = 0; i < 64; ++i) {
                for (int j = 0; j < 64; ++j) {
                    double v = i == j ? 1.0 : 0.0;
                    for (int m = 0; m < i; ++m) v -= A[i * 64 + m] * Tm[m * 64 + j];
                    Tm[i * 64 + j] = v;
                }
            }
            const size_t ch = (size_t)c * s.Hv + h;
            for (int i = 0; i < 64; ++i) {
                acc(3, G[ch * 64 + i], Gd[i]);
                for (int x = 0; x < dk; ++x) {
                    double w = 0;
                    for (int j = 0; j <= i; ++j) w += Tm[i * 64 + j] * bd[j] * exp(Gd[j]) * K[j * dk + x];
                    acc(0, __half2float(W[ch * 64 * dk + delta_img_h(i, x)]), w);
                }
                for (int x = 0; x < dv; ++x) {
                    double u = 0;
                    for (int j = 0; j <= i; ++j) u += Tm[i * 64 + j] * bd[j] * V[j * dv + x];
                    acc(1, U[ch * 64 * dv + delta_img_u(i, x)], u);
                }
                if (has_out)
                    for (int j = 0; j < 64; ++j) {
                        double p = 0;
                        if (j <= i) {
                            for (int x = 0; x < dk; ++x) p += Q[i * dk + x] * K[j * dk + x];
                            p *= exp(Gd[i] - Gd[j]);
                        }
                        acc(2, (double)__half2float(P[ch * 8192 + delta_img_h(i, j)]) + __half2float(P[ch * 8192 + 4096 + delta_img_h(i, j)]), p);
                    }
            }
            if (h < s.Hk) {
                const size_t ck = (size_t)c * s.Hk + kh;
                for (int i = 0; i < 64; ++i)
                    for (int x = 0; x < dk; ++x) {
                        acc(4, __half2float(KH[ck * 64 * dk + delta_img_h(x, i)]), K[i * dk + x]);  // K^T [dk][64]
                        if (has_out) acc(5, __half2float(QH[ck * 64 * dk + delta_img_h(i, x)]), Q[i * dk + x]);
                    }
            }
        }
    }
    const char* names[6] = {"W", "U", "P", "G", "Kh", "Qh"};
    printf("    prep workspace vs float64:");
    for (int w = 0; w < 6; ++w)
        printf(" %s %.2e%s", names[w], sqrt(e[w][0] / std::max(e[w][1], 1e-300)),
               nan[w] ? (" NaN:" + std::to_string(nan[w])).c_str() : "");
    printf("  (expected: W, Kh, Qh ~3e-4 (f16); U ~1e-4 (T in f16); P, G < 1e-5)\n");
}

// Extra detail on a failed comparison: where the error is.
static void explain_o(const std::vector<float>& o, const std::vector<double>& ref, int T, int R, int cols, int dv) {
    const int q0 = T - R;
    printf("    o per 64-token chunk (rel err):");
    for (int c = 0; c * 64 < T && c < 24; ++c) {
        double num = 0, den = 0;
        long long nn = 0;
        for (int t = std::max(c * 64, q0); t < std::min(T, c * 64 + 64); ++t)
            for (int j = 0; j < cols; ++j) {
                const double r = ref[(size_t)t * cols + j], x = o[(size_t)(t - q0) * cols + j];
                if (!std::isfinite(x)) { nn++; continue; }
                num += (x - r) * (x - r), den += r * r;
            }
        if (den > 0 || nn) printf(" c%d=%.1e%s", c, sqrt(num / std::max(den, 1e-300)), nn ? "(NaN)" : "");
    }
    printf("\n    o per 32-column slice of head 0 and head 1 (rel err):");
    for (int h = 0; h < 2; ++h)
        for (int sl = 0; sl < dv / 32; ++sl) {
            double num = 0, den = 0;
            for (int t = q0; t < T; ++t)
                for (int j = h * dv + sl * 32; j < h * dv + sl * 32 + 32; ++j) {
                    const double r = ref[(size_t)t * cols + j], x = o[(size_t)(t - q0) * cols + j];
                    num += (x - r) * (x - r), den += r * r;
                }
            printf(" h%d/s%d=%.1e", h, sl, sqrt(num / std::max(den, 1e-300)));
        }
    printf("\n");
}

struct DeltaResult {
    ErrStat o, s;
};

// Runs one path on fresh device copies; returns errors vs the reference.
// o and the final state from the initial state (outputs and workspace poisoned first): the
// chunked path (with two: the two-set scan) or token by token.
static void run_outputs(const DeltaInputs& in, DeltaDev& d, int R, bool chunked, bool two, std::vector<float>& o,
                        std::vector<float>& st) {
    const int cols = in.s.Hv * in.s.dv;
    CK(cudaMemcpy(d.state, in.s0.data(), in.s0.size() * 4, cudaMemcpyHostToDevice));
    poison(d.o, (size_t)std::max(R, 1) * cols * 4);
    poison(d.work, d.work_floats * 4);
    const DeltaArgs a = delta_args(in, d, R);
    if (chunked) launch_chunked(a, true, two);
    else launch_step(a, true);
    o.resize((size_t)R * cols);
    st.resize(in.s0.size());
    CK(cudaMemcpy(o.data(), d.o, o.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(st.data(), d.state, st.size() * 4, cudaMemcpyDeviceToHost));
}

static DeltaResult run_delta(const DeltaInputs& in, DeltaDev& d, int R, bool chunked,
                             const std::vector<double>& oref, const std::vector<double>& sref, bool verbose) {
    const DeltaShape s = in.s;
    const int cols = s.Hv * s.dv;
    std::vector<float> o, st;
    run_outputs(in, d, R, chunked, false, o, st);
    DeltaResult r;
    r.o = compare(o.data(), oref.data() + (size_t)(in.T - R) * cols, o.size());
    r.s = compare(st.data(), sref.data(), st.size());
    const double bound = chunked ? 1e-3 : 1e-4;
    const bool bad = !(r.o.rel < bound) || !(r.s.rel < bound);
    if (bad || verbose) {
        if (r.o.nan) printf("    o: %lld non-finite, first at row %lld col %lld\n", r.o.nan, r.o.first_nan / cols, r.o.first_nan % cols);
        if (r.s.nan) printf("    state: %lld non-finite, first at head %lld elem %lld\n", r.s.nan,
                            r.s.first_nan / (s.dk * s.dv), r.s.first_nan % (s.dk * s.dv));
        if (r.o.arg_max >= 0)
            printf("    o max |err| %.3e at row %lld (token %lld) col %lld (head %lld): got %.6f ref %.6f\n", r.o.max_abs,
                   r.o.arg_max / cols, in.T - R + r.o.arg_max / cols, r.o.arg_max % cols, (r.o.arg_max % cols) / s.dv,
                   o[r.o.arg_max], oref[(size_t)(in.T - R) * cols + r.o.arg_max]);
        if (bad) {
            explain_o(o, oref, in.T, R, cols, s.dv);
            if (chunked) diagnose_prep(in, R, d);
        }
    }
    return r;
}

static const char* decay_name(double gmin) { return gmin < -10 ? "strong" : (gmin > -0.1 ? "weak" : "normal"); }

static void delta_tests() {
    printf("\n== delta rule: checks (chunked bound 1e-3, step bound 1e-4; rel = ||out-ref||/||ref||) ==\n");
    const DeltaShape shapes[4] = {{16, 32, 128, 128}, {2, 8, 64, 64}, {2, 8, 128, 128}, {16, 32, 64, 64}};
    struct Case { int T; double gmin; };
    const Case cases[] = {{1, -2}, {7, -2}, {64, -2}, {100, -2}, {512, -2}, {100, -20}, {512, -20}, {512, -0.02}, {1000, -2}};
    uint64_t seed = 1;
    bool diag_shown[4] = {};
    for (int si = 0; si < 4; ++si) {
        const DeltaShape s = shapes[si];
        for (const Case& cs : cases) {
            if (cs.T == 1000 && si != 1) continue;
            const DeltaInputs in = make_delta_inputs(cs.T, s, cs.gmin, seed++);
            std::vector<double> oref, sref;
            delta_reference(in, oref, sref);
            DeltaDev d = upload(in);
            std::vector<int> Rs = {cs.T};
            if (cs.T > 1) Rs.push_back(1);
            if (cs.T == 1000) Rs.push_back(100);
            for (int R : Rs) {
                for (int chunked = 1; chunked >= 0; --chunked) {
                    char name[200];
                    snprintf(name, sizeof name, "%s Hk=%d Hv=%d dk=%d dv=%d T=%d R=%d g=%s", chunked ? "chunked" : "step   ",
                             s.Hk, s.Hv, s.dk, s.dv, cs.T, R, decay_name(cs.gmin));
                    g_what = name;
                    const bool verbose = chunked && !diag_shown[si] && cs.T == 100 && R == cs.T;
                    const DeltaResult r = run_delta(in, d, R, chunked, oref, sref, verbose);
                    if (verbose) {
                        diagnose_prep(in, R, d);
                        diag_shown[si] = true;
                    }
                    const double bound = chunked ? 1e-3 : 1e-4;
                    const bool ok = r.o.rel < bound && r.s.rel < bound;
                    printf("  %-4s %s  o %.2e  state %.2e\n", ok ? "ok" : "FAIL", name, r.o.rel, r.s.rel);
                    check(ok, name);
                }
            }
            d.free_all();
        }
    }
}

static double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Median time (ms) of `reps` runs of f, each bracketed by events, after 3 warm-ups.
template <class F>
static double time_ms(F f, int reps = 20) {
    for (int i = 0; i < 3; ++i) f();
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0));
        f();
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

static void delta_timing(bool quick) {
    printf("\n== delta rule: timing (Hk=16 Hv=32 dk=dv=128, R=T, g in [-2,0], median of 20, CUDA events) ==\n");
    printf("   effective FLOPs = 7*T*Hv*dk*dv (decay, S^T k, update, S^T q, token by token)\n");
    printf("   scan2 = delta_rule_chunk_scan2 (two operand sets, TALLY_DELTA_SCAN=ring): its time, and whether\n"
           "   its o and state equal the one-set scan's bit for bit (\"same\") from the same workspace\n");
    printf("  %-28s %10s %10s %10s %10s %6s %9s %10s %10s\n", "shape", "total ms", "prep ms", "scan ms", "scan2 ms", "bits",
           "TFLOP/s", "rel err o", "rel err S");
    const DeltaShape s = {16, 32, 128, 128};
    std::vector<int> Ts = {512, 2048, 8192};
    if (quick) Ts.pop_back();
    for (int T : Ts) {
        char name[100];
        snprintf(name, sizeof name, "chunked T=%d", T);
        g_what = name;
        const DeltaInputs in = make_delta_inputs(T, s, -2, 1000 + T);
        std::vector<double> oref, sref;
        delta_reference(in, oref, sref);
        DeltaDev d = upload(in);
        const DeltaResult r = run_delta(in, d, T, true, oref, sref, false);
        check(r.o.rel < 1e-3 && r.s.rel < 1e-3, name);
        const DeltaArgs a = delta_args(in, d, T);
        const int nc = (int)delta_chunks(T);
        const double tot = time_ms([&] { launch_chunked(a, false); });
        const double tp = time_ms([&] {
            delta_rule_chunk_prep<<<dim3(nc, a.Hv), 256, delta_prep_smem_bytes(a.dk)>>>(a);
            after_launch("delta_rule_chunk_prep", false);
        });
        const double ts = time_ms([&] { launch_scan(a, false, false); });
        const double ts2 = time_ms([&] { launch_scan(a, false, true); });
        std::vector<float> o1, s1, o2, s2;
        run_outputs(in, d, T, true, false, o1, s1);
        run_outputs(in, d, T, true, true, o2, s2);
        const bool same = o1.size() == o2.size() && s1.size() == s2.size() &&
                          !memcmp(o1.data(), o2.data(), o1.size() * 4) && !memcmp(s1.data(), s2.data(), s1.size() * 4);
        check(same, (std::string(name) + ": scan2 bit for bit").c_str());
        const double fl = 7.0 * T * s.Hv * s.dk * s.dv;
        printf("  %-28s %10.4f %10.4f %10.4f %10.4f %6s %9.2f %10.2e %10.2e\n", name, tot, tp, ts, ts2, same ? "same" : "DIFF",
               fl / (tot * 1e9), r.o.rel, r.s.rel);
        d.free_all();
    }
    for (int T : {1, 16, 64, 512}) {
        char name[100];
        snprintf(name, sizeof name, "step T=%d", T);
        g_what = name;
        const DeltaInputs in = make_delta_inputs(T, s, -2, 2000 + T);
        std::vector<double> oref, sref;
        delta_reference(in, oref, sref);
        DeltaDev d = upload(in);
        const DeltaResult r = run_delta(in, d, T, false, oref, sref, false);
        check(r.o.rel < 1e-4 && r.s.rel < 1e-4, name);
        const DeltaArgs a = delta_args(in, d, T);
        const double t = time_ms([&] { launch_step(a, false); });
        const double tc = time_ms([&] { launch_chunked(a, false); });
        const double fl = 7.0 * T * s.Hv * s.dk * s.dv;
        printf("  %-28s %10.4f %10s %10s %9.2f %10.2e %10.2e   (chunked at this T: %.4f ms)\n", name, t, "-", "-",
               fl / (t * 1e9), r.o.rel, r.s.rel, tc);
        d.free_all();
    }
}

// ---------------------------------------------------------------------------------------------
// conv_silu (+ fused L2 norm) and delta_gates.

struct ConvCase {
    int T, C, K;
    bool l2;
    int group, Hk;  // l2: q = [0, Hk*group), k = [Hk*group, 2*Hk*group)
};

static void conv_reference(const std::vector<float>& x, const std::vector<float>& st, const std::vector<float>& w,
                           const ConvCase& cs, std::vector<double>& y, std::vector<double>& nst) {
    const int T = cs.T, C = cs.C, K = cs.K;
    y.assign((size_t)T * C, 0.0);
    nst.assign((size_t)(K - 1) * C, 0.0);
    auto xe = [&](int r, int c) -> double { return r < K - 1 ? st[(size_t)r * C + c] : x[(size_t)(r - K + 1) * C + c]; };
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) {
            double acc = 0;
            for (int j = 0; j < K; ++j) acc += (double)w[(size_t)c * K + j] * xe(t + j, c);
            y[(size_t)t * C + c] = acc / (1.0 + exp(-acc));
        }
    if (cs.l2) {
        const int nq = cs.Hk * cs.group;
        for (int t = 0; t < T; ++t)
            for (int g0 = 0; g0 < 2 * nq; g0 += cs.group) {
                double ss = 0;
                for (int c = g0; c < g0 + cs.group; ++c) ss += y[(size_t)t * C + c] * y[(size_t)t * C + c];
                double f = 1.0 / sqrt(ss + 1e-6);
                if (g0 < nq) f /= sqrt((double)cs.group);
                for (int c = g0; c < g0 + cs.group; ++c) y[(size_t)t * C + c] *= f;
            }
    }
    for (int i = 0; i < K - 1; ++i)
        for (int c = 0; c < C; ++c) nst[(size_t)i * C + c] = xe(T + i, c);
}

static ConvSiluL2Args conv_args(const ConvCase& cs, float* x, i64 ldx, float* st, float* w, float* y, i64 ldy) {
    ConvSiluL2Args a;
    a.conv.x = x, a.conv.ldx = ldx, a.conv.state = st, a.conv.lds = cs.C, a.conv.w = w, a.conv.y = y, a.conv.ldy = ldy;
    a.conv.T = cs.T, a.conv.C = cs.C, a.conv.K = cs.K;
    a.norm_cols = cs.l2 ? 2 * cs.Hk * cs.group : 0;
    a.group = cs.l2 ? cs.group : 4;
    a.scale_cols = cs.l2 ? cs.Hk * cs.group : 0;
    a.eps = 1e-6f;
    a.scale = cs.l2 ? (float)(1.0 / sqrt((double)cs.group)) : 1.0f;
    return a;
}

static void launch_conv(const ConvSiluL2Args& a, bool l2, bool sync) {
    if (a.conv.T == 0) return;
    dim3 grid((a.conv.C + 4 * CONV_THREADS - 1) / (4 * CONV_THREADS), (a.conv.T + CONV_ROWS - 1) / CONV_ROWS);
    if (l2) conv_silu_l2norm<<<grid, CONV_THREADS>>>(a);
    else conv_silu<<<grid, CONV_THREADS>>>(a.conv);
    after_launch(l2 ? "conv_silu_l2norm" : "conv_silu", sync);
}

static void conv_tests_and_timing(bool timing) {
    printf("\n== conv_silu / conv_silu_l2norm: checks (bound 1e-5) ==\n");
    std::vector<ConvCase> cases = {
        {1, 8192, 4, false, 0, 0},  {2, 8192, 4, false, 0, 0},   {5, 8192, 4, false, 0, 0},
        {100, 8192, 4, false, 0, 0}, {512, 8192, 4, false, 0, 0}, {37, 1001, 4, false, 0, 0},
        {70, 8192, 2, false, 0, 0}, {3, 8192, 3, false, 0, 0},   {1, 8192, 4, true, 128, 16},
        {100, 8192, 4, true, 128, 16}, {512, 8192, 4, true, 128, 16}, {100, 768, 4, true, 64, 2},
    };
    uint64_t seed = 77;
    for (const ConvCase& cs : cases) {
        for (int ldpad = 0; ldpad <= (cs.C == 8192 && cs.T == 100 ? 1 : 0); ++ldpad) {
            char name[160];
            const i64 ld = cs.C + (ldpad ? 3 : 0);  // odd leading dimension: the scalar path
            snprintf(name, sizeof name, "%s T=%d C=%d K=%d ld=%lld%s", cs.l2 ? "conv_silu_l2norm" : "conv_silu", cs.T, cs.C,
                     cs.K, (long long)ld, cs.l2 ? (" group=" + std::to_string(cs.group)).c_str() : "");
            g_what = name;
            Rng r(seed++);
            std::vector<float> x((size_t)cs.T * cs.C), st((size_t)(cs.K - 1) * cs.C), w((size_t)cs.C * cs.K);
            for (auto& v : x) v = (float)r.normal();
            for (auto& v : st) v = (float)r.normal();
            for (auto& v : w) v = (float)(0.5 * r.normal());
            std::vector<double> yref, sref;
            conv_reference(x, st, w, cs, yref, sref);
            float* dx = dalloc<float>((size_t)cs.T * ld);
            float* dy = dalloc<float>((size_t)cs.T * ld);
            float* ds = dalloc<float>(std::max<size_t>(st.size(), 1));
            float* dw = dalloc<float>(w.size());
            CK(cudaMemcpy2D(dx, ld * 4, x.data(), cs.C * 4, cs.C * 4, cs.T, cudaMemcpyHostToDevice));
            if (!st.empty()) CK(cudaMemcpy(ds, st.data(), st.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
            poison(dy, (size_t)cs.T * ld * 4);
            ConvSiluL2Args a = conv_args(cs, dx, ld, ds, dw, dy, ld);
            a.conv.lds = cs.C;
            launch_conv(a, cs.l2, true);
            std::vector<float> y((size_t)cs.T * cs.C), ns(st.size());
            CK(cudaMemcpy2D(y.data(), cs.C * 4, dy, ld * 4, cs.C * 4, cs.T, cudaMemcpyDeviceToHost));
            if (!ns.empty()) CK(cudaMemcpy(ns.data(), ds, ns.size() * 4, cudaMemcpyDeviceToHost));
            const ErrStat ey = compare(y.data(), yref.data(), y.size());
            const ErrStat es = ns.empty() ? ErrStat{} : compare(ns.data(), sref.data(), ns.size());
            const bool ok = ey.rel < 1e-5 && es.rel < 1e-6;
            printf("  %-4s %-52s y %.2e  state %.2e\n", ok ? "ok" : "FAIL", name, ey.rel, es.rel);
            if (!ok) {
                if (ey.nan) printf("    y: %lld non-finite, first row %lld col %lld\n", ey.nan, ey.first_nan / cs.C, ey.first_nan % cs.C);
                if (ey.arg_max >= 0) printf("    y max err at row %lld col %lld: got %f ref %f\n", ey.arg_max / cs.C, ey.arg_max % cs.C, y[ey.arg_max], yref[ey.arg_max]);
                if (es.arg_max >= 0) printf("    state max err at row %lld col %lld\n", es.arg_max / cs.C, es.arg_max % cs.C);
            }
            check(ok, name);
            cudaFree(dx), cudaFree(dy), cudaFree(ds), cudaFree(dw);
        }
    }
    if (!timing) return;
    printf("\n== conv timing (C=8192, K=4; bytes = x read + y write; median of 20) ==\n");
    printf("  %-36s %10s %10s\n", "shape", "ms", "GB/s");
    for (int T : {512, 8192})
        for (int l2 = 0; l2 < 2; ++l2) {
            ConvCase cs = {T, 8192, 4, l2 == 1, 128, 16};
            float* dx = dalloc<float>((size_t)T * 8192);
            float* dy = dalloc<float>((size_t)T * 8192);
            float* ds = dalloc<float>(3 * 8192);
            float* dw = dalloc<float>(4 * 8192);
            std::vector<float> hx((size_t)T * 8192);
            Rng r(9 + T);
            for (auto& v : hx) v = (float)r.normal();
            CK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
            for (auto& v : hx) v = (float)(0.5 * r.normal());
            CK(cudaMemcpy(ds, hx.data(), 3 * 8192 * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dw, hx.data() + 3 * 8192, 4 * 8192 * 4, cudaMemcpyHostToDevice));
            const ConvSiluL2Args a = conv_args(cs, dx, 8192, ds, dw, dy, 8192);
            char name[100];
            snprintf(name, sizeof name, "%s T=%d", l2 ? "conv_silu_l2norm" : "conv_silu", T);
            g_what = name;
            const double ms = time_ms([&] { launch_conv(a, l2 == 1, false); });
            const double bytes = 2.0 * T * 8192 * 4;
            printf("  %-36s %10.4f %10.1f\n", name, ms, bytes / (ms * 1e6));
            cudaFree(dx), cudaFree(dy), cudaFree(ds), cudaFree(dw);
        }
}

static void gates_tests_and_timing(bool timing) {
    printf("\n== delta_gates: checks (bound 1e-6) ==\n");
    const int H = 32;
    for (int T : {1, 513, 8192}) {
        char name[100];
        snprintf(name, sizeof name, "delta_gates T=%d H=%d", T, H);
        g_what = name;
        Rng r(500 + T);
        const int ldin = 2 * H;  // b | a in one buffer
        std::vector<float> ba((size_t)T * ldin), bias(H), sa(H);
        for (auto& v : ba) v = (float)(8.0 * r.normal());  // reaches the linear branch (> 20) sometimes
        for (auto& v : bias) v = (float)(4.0 * r.normal());
        for (auto& v : sa) v = (float)(-exp(r.normal()));
        float* dba = dalloc<float>(ba.size());
        float* dbias = dalloc<float>(H);
        float* dsa = dalloc<float>(H);
        float* dout = dalloc<float>((size_t)T * 2 * H);  // beta | g
        CK(cudaMemcpy(dba, ba.data(), ba.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbias, bias.data(), H * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsa, sa.data(), H * 4, cudaMemcpyHostToDevice));
        poison(dout, (size_t)T * 2 * H * 4);
        DeltaGatesArgs a;
        a.b = dba, a.ldbin = ldin, a.a = dba + H, a.lda = ldin, a.dt_bias = dbias, a.ssm_a = dsa;
        a.beta = dout, a.ldbeta = 2 * H, a.g = dout + H, a.ldg = 2 * H, a.T = T, a.H = H;
        const int blocks = (int)std::min<i64>(((i64)T * H + 255) / 256, 4096);
        delta_gates<<<blocks, 256>>>(a);
        after_launch("delta_gates", true);
        std::vector<float> out((size_t)T * 2 * H);
        CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        std::vector<float> gb((size_t)T * H), gg((size_t)T * H);
        std::vector<double> rb((size_t)T * H), rg((size_t)T * H);
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < H; ++j) {
                const double b = ba[(size_t)t * ldin + j], x = (double)ba[(size_t)t * ldin + H + j] + bias[j];
                rb[(size_t)t * H + j] = 1.0 / (1.0 + exp(-b));
                rg[(size_t)t * H + j] = sa[j] * (x > 20.0 ? x : log1p(exp(x)));
                gb[(size_t)t * H + j] = out[(size_t)t * 2 * H + j];
                gg[(size_t)t * H + j] = out[(size_t)t * 2 * H + H + j];
            }
        const ErrStat eb = compare(gb.data(), rb.data(), gb.size()), eg = compare(gg.data(), rg.data(), gg.size());
        const bool ok = eb.rel < 1e-6 && eg.rel < 1e-6;
        printf("  %-4s %-30s beta %.2e  g %.2e\n", ok ? "ok" : "FAIL", name, eb.rel, eg.rel);
        check(ok, name);
        if (timing && T == 8192) {
            const double ms = time_ms([&] {
                delta_gates<<<blocks, 256>>>(a);
                after_launch("delta_gates", false);
            });
            printf("  timing %s: %.4f ms, %.1f GB/s (4 x T x H floats)\n", name, ms, 16.0 * T * H / (ms * 1e6));
        }
        cudaFree(dba), cudaFree(dbias), cudaFree(dsa), cudaFree(dout);
    }
}

int main(int argc, char** argv) {
    bool quick = false, timing = true;
    int profile_t = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--no-time")) timing = false;
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_t = atoi(argv[++i]);
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int clock_khz = 0;
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("device: %s, %d SMs, %.0f MHz, L2 %d MB, smem/block optin %zu KB\n", p.name, p.multiProcessorCount,
           clock_khz / 1e3, p.l2CacheSize >> 20, p.sharedMemPerBlockOptin >> 10);
    const int prep_smem = delta_prep_smem_bytes(128), scan_smem = delta_scan_smem_bytes(128);
    CK(cudaFuncSetAttribute(delta_rule_chunk_prep, cudaFuncAttributeMaxDynamicSharedMemorySize, prep_smem));
    CK(cudaFuncSetAttribute(delta_rule_chunk_scan, cudaFuncAttributeMaxDynamicSharedMemorySize, scan_smem));
    const int scan2_smem = delta_scan_smem_bytes(128, 2);
    CK(cudaFuncSetAttribute(delta_rule_chunk_scan2, cudaFuncAttributeMaxDynamicSharedMemorySize, scan2_smem));
    struct K { const char* n; const void* f; int threads, smem; } ks[] = {
        {"delta_rule_chunk_prep", (const void*)delta_rule_chunk_prep, 256, prep_smem},
        {"delta_rule_chunk_scan", (const void*)delta_rule_chunk_scan, 256, scan_smem},
        {"delta_rule_chunk_scan2", (const void*)delta_rule_chunk_scan2, 256, scan2_smem},
        {"delta_rule_step", (const void*)delta_rule_step, 128, 0},
        {"conv_silu", (const void*)conv_silu, CONV_THREADS, 0},
        {"conv_silu_l2norm", (const void*)conv_silu_l2norm, CONV_THREADS, 0},
        {"delta_gates", (const void*)delta_gates, 256, 0},
    };
    for (const K& k : ks) {
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, k.f));
        int blocks = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k.f, k.threads, k.smem));
        printf("  %-18s regs %3d, static smem %5zu B, dynamic smem %6d B, local %zu B, blocks/SM %d\n", k.n, fa.numRegs,
               fa.sharedSizeBytes, k.smem, fa.localSizeBytes, blocks);
    }
    printf("  delta workspace at T=8192 (Hk=16 Hv=32 dk=dv=128): %.1f MB\n", delta_work_floats(8192, 16, 32, 128, 128) * 4 / 1e6);

    if (profile_t > 0) {
        const DeltaShape s = {16, 32, 128, 128};
        const DeltaInputs in = make_delta_inputs(profile_t, s, -2, 1000 + profile_t);
        DeltaDev d = upload(in);
        launch_chunked(delta_args(in, d, profile_t), true);
        d.free_all();
        return 0;
    }
    delta_tests();
    conv_tests_and_timing(timing);
    gates_tests_and_timing(timing);
    if (timing) delta_timing(quick);
    printf("\nSUMMARY: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
