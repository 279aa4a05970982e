// The chunked delta rule (delta_rule_chunk_prep + delta_rule_chunk_scan, delta.cu) on the CPU
// emulator of lab/gemm/emu: the device code compiled as C++, every thread a fiber, mma.sync,
// ldmatrix, cp.async and wgmma (both operands from shared memory, through their descriptors)
// emulated with the hardware's fragment layouts, barriers released in a random order. Checked as
// lab/delta/bench.cu checks the GPU: o and the final state against a sequential float64
// reference, bound 1e-3 (norm-wise relative error); NaN-poisoned outputs. The two-set scan
// (delta_rule_chunk_scan2, TALLY_DELTA_SCAN=ring) bit for bit against the one-set scan.
// Build and run (from the repository root; ~10 s):
//   g++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/delta/emu_test.cpp -o /tmp/delta_emu && /tmp/delta_emu
// Exit code 1 if a check fails (3: the emulator found a deadlock; 4: a bad primitive use).
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <memory>

#include "delta.cu"

namespace {

struct Shape {
    int Hk, Hv, dk, dv;
};

// Device buffers: host memory, kept until the case ends.
struct Bufs {
    std::vector<std::unique_ptr<float[]>> owned;
    float* alloc(size_t n) {
        owned.emplace_back(new float[std::max<size_t>(n, 4)]);
        return owned.back().get();
    }
    float* upload(const std::vector<float>& v) {
        float* p = alloc(v.size());
        std::copy(v.begin(), v.end(), p);
        return p;
    }
};

double rel(const std::vector<double>& got, const std::vector<double>& want, long long* nonfinite) {
    double num = 0, den = 0;
    *nonfinite = 0;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) {
            (*nonfinite)++;
            continue;
        }
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

int run_case(Shape s, int T, int R, double gmin, uint64_t seed) {
    ref::Rng r(seed);
    const int ld = 2 * s.Hk * s.dk + s.Hv * s.dv;
    std::vector<float> qkv(size_t(T) * ld), g(size_t(T) * s.Hv), beta(size_t(T) * s.Hv), s0(size_t(s.Hv) * s.dk * s.dv);
    for (auto& x : qkv) x = float(r.normal());
    for (int t = 0; t < T; t++)
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < s.Hk; h++) {
                float* x = &qkv[size_t(t) * ld + size_t(part) * s.Hk * s.dk + size_t(h) * s.dk];
                double n = 0;
                for (int i = 0; i < s.dk; i++) n += double(x[i]) * x[i];
                const double sc = (part == 0 ? 1.0 / std::sqrt(double(s.dk)) : 1.0) / std::sqrt(n);
                for (int i = 0; i < s.dk; i++) x[i] = float(x[i] * sc);
            }
    for (auto& x : g) x = float(gmin * r.uniform());
    for (auto& x : beta) x = float(0.02 + 0.96 * r.uniform());
    for (auto& x : s0) x = float(0.5 * r.normal());

    // Sequential float64 reference.
    std::vector<double> oref(size_t(T) * s.Hv * s.dv, 0.0), sref(s0.size());
    for (int h = 0; h < s.Hv; h++) {
        const int kh = h % s.Hk;
        std::vector<double> S(s0.begin() + size_t(h) * s.dk * s.dv, s0.begin() + size_t(h + 1) * s.dk * s.dv);
        std::vector<double> kv(s.dv);
        for (int t = 0; t < T; t++) {
            const float* row = &qkv[size_t(t) * ld];
            const float *q = row + kh * s.dk, *k = row + s.Hk * s.dk + kh * s.dk, *v = row + 2 * s.Hk * s.dk + h * s.dv;
            const double dec = std::exp(double(g[size_t(t) * s.Hv + h])), b = beta[size_t(t) * s.Hv + h];
            std::fill(kv.begin(), kv.end(), 0.0);
            for (int i = 0; i < s.dk; i++)
                for (int j = 0; j < s.dv; j++) {
                    S[size_t(i) * s.dv + j] *= dec;
                    kv[j] += S[size_t(i) * s.dv + j] * k[i];
                }
            for (int j = 0; j < s.dv; j++) kv[j] = b * (v[j] - kv[j]);
            for (int i = 0; i < s.dk; i++)
                for (int j = 0; j < s.dv; j++) {
                    S[size_t(i) * s.dv + j] += k[i] * kv[j];
                    oref[size_t(t) * s.Hv * s.dv + size_t(h) * s.dv + j] += S[size_t(i) * s.dv + j] * q[i];
                }
        }
        std::copy(S.begin(), S.end(), sref.begin() + size_t(h) * s.dk * s.dv);
    }

    Bufs b;
    DeltaArgs a{};
    const float* dqkv = b.upload(qkv);
    a.q = dqkv + size_t(T - R) * ld;
    a.ldq = ld;
    a.k = dqkv + s.Hk * s.dk;
    a.ldk = ld;
    a.v = dqkv + 2 * s.Hk * s.dk;
    a.ldv = ld;
    a.g = b.upload(g);
    a.ldg = s.Hv;
    a.beta = b.upload(beta);
    a.ldb = s.Hv;
    a.state = b.upload(s0);
    a.o = b.alloc(size_t(R) * s.Hv * s.dv);
    for (size_t i = 0; i < size_t(R) * s.Hv * s.dv; i++) a.o[i] = NAN;
    a.ldo = s.Hv * s.dv;
    a.work = b.alloc(size_t(delta_work_floats(T, s.Hk, s.Hv, s.dk, s.dv)));
    a.T = T, a.R = R, a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    const unsigned nc = unsigned(delta_chunks(T));
    emu::launch({nc, unsigned(s.Hv), 1}, {256, 1, 1}, [&] { delta_rule_chunk_prep(a); });
    // The two-set scan (delta_rule_chunk_scan2) first, on the initial state and NaN outputs,
    // then the one-set scan on the same inputs: every output of the first must equal the
    // second's bit for bit (the same products in the same order, only the copies' timing
    // differs), and the second is checked against the float64 reference below.
    emu::launch({unsigned(s.Hv), unsigned(s.dv / DELTA_NS), 1}, {256, 1, 1}, [&] { delta_rule_chunk_scan2(a); });
    const std::vector<float> o2(a.o, a.o + size_t(R) * s.Hv * s.dv), s2(a.state, a.state + s0.size());
    std::copy(s0.begin(), s0.end(), a.state);
    for (size_t i = 0; i < size_t(R) * s.Hv * s.dv; i++) a.o[i] = NAN;
    emu::launch({unsigned(s.Hv), unsigned(s.dv / DELTA_NS), 1}, {256, 1, 1}, [&] { delta_rule_chunk_scan(a); });
    long long differ = 0;
    for (size_t i = 0; i < o2.size(); i++) differ += std::memcmp(&o2[i], &a.o[i], 4) != 0;
    for (size_t i = 0; i < s2.size(); i++) differ += std::memcmp(&s2[i], &a.state[i], 4) != 0;

    std::vector<double> og(size_t(R) * s.Hv * s.dv), ow(og.size()), sg(sref.size());
    for (size_t i = 0; i < og.size(); i++) og[i] = a.o[i], ow[i] = oref[size_t(T - R) * s.Hv * s.dv + i];
    for (size_t i = 0; i < sg.size(); i++) sg[i] = a.state[i];
    long long nf_o, nf_s;
    const double eo = rel(og, ow, &nf_o), es = rel(sg, sref, &nf_s);
    const bool ok = eo < 1e-3 && es < 1e-3 && nf_o == 0 && nf_s == 0 && differ == 0;
    std::printf("  %-4s Hk=%d Hv=%d dk=%d dv=%d T=%d R=%d gmin=%g  o %.2e  state %.2e  scan2 vs scan: %lld values differ%s\n",
                ok ? "ok" : "FAIL", s.Hk, s.Hv, s.dk, s.dv, T, R, gmin, eo, es, differ,
                (nf_o || nf_s) ? "  (non-finite values)" : "");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    std::printf("delta rule, chunked (prep + scan) on the CPU emulator, bound 1e-3:\n");
    int bad = 0;
    bad += run_case({1, 2, 128, 32}, 130, 130, -2, 1);
    bad += run_case({1, 2, 64, 64}, 100, 100, -2, 2);
    if (!quick) {
        bad += run_case({2, 4, 128, 64}, 70, 1, -2, 3);
        bad += run_case({1, 1, 128, 32}, 64, 64, -20, 4);
        bad += run_case({1, 2, 64, 32}, 200, 37, -0.02, 5);
        // Nine chunks: each of scan2's two operand sets refilled four times while the other is read.
        bad += run_case({1, 2, 128, 32}, 520, 520, -1, 6);
    }
    std::printf("%s\n", bad ? "FAILED" : "all passed");
    return bad ? 1 : 0;
}
