// The chunked delta rule (delta_rule_chunk_prep + delta_rule_chunk_scan, delta.cu) on the CPU
// emulator of lab/gemm/emu: the device code compiled as C++, every thread a fiber, mma.sync,
// ldmatrix, cp.async and wgmma (both operands from shared memory, through their descriptors)
// emulated with the hardware's fragment layouts, barriers released in a random order. Checked as
// lab/delta/bench.cu checks the GPU: o and the final state against a sequential float64
// reference, bound 1e-3 (norm-wise relative error); NaN-poisoned outputs. The two-set scan
// (delta_rule_chunk_scan2, TALLY_DELTA_SCAN=ring) bit for bit against the one-set scan.
// The prep's fused prologue (TALLY_DELTA_PREP=prologue: the delta gates and the q and k L2
// norms inside delta_rule_chunk_prep) bit for bit against the unfused launches the engine runs
// without it (norm_rows_w for each norm, in place; delta_gates; then prep and scan): the
// outputs, the final state and the gates' stored outputs, with q and k left as they came. The
// same for the token-by-token rule (delta_rule_step, T <= 16: a decode step or a verification
// batch) with its prologue, against norm_rows at 128 threads (as the engine runs those few rows'
// norms), delta_gates and the plain step.
// Build and run (from the repository root; ~10 s):
//   g++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/delta/emu_test.cpp -o /tmp/delta_emu && /tmp/delta_emu
// Exit code 1 if a check fails (3: the emulator found a deadlock; 4: a bad primitive use).
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <memory>

#include "delta.cu"
#include "elementwise.cu"
#include "norm.cu"

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

// The arguments of a chunked run over the rows x of q | k | v (ld floats a row; q holds the last R
// rows), g and beta: the initial state s0 copied, the outputs NaN-poisoned, a workspace.
DeltaArgs chunk_args(Bufs& b, Shape s, int T, int R, int ld, const float* x, const float* g, const float* beta,
                     const std::vector<float>& s0) {
    DeltaArgs a{};
    a.q = x + size_t(T - R) * ld;
    a.ldq = ld;
    a.k = x + s.Hk * s.dk;
    a.ldk = ld;
    a.v = x + 2 * s.Hk * s.dk;
    a.ldv = ld;
    a.g = g;
    a.ldg = s.Hv;
    a.beta = beta;
    a.ldb = s.Hv;
    a.state = b.upload(s0);
    a.o = b.alloc(size_t(R) * s.Hv * s.dv);
    for (size_t i = 0; i < size_t(R) * s.Hv * s.dv; i++) a.o[i] = NAN;
    a.ldo = s.Hv * s.dv;
    a.work = b.alloc(size_t(delta_work_floats(T, s.Hk, s.Hv, s.dk, s.dv)));
    a.T = T, a.R = R, a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    return a;
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
    DeltaArgs a = chunk_args(b, s, T, R, ld, b.upload(qkv), b.upload(g), b.upload(beta), s0);
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

// The prologue case: q and k un-normalised (rows of varied length), the gates' inputs random.
// Unfused: q and k normalised in place by norm_rows_w (as the plan's L2 norm nodes run at a
// prompt), g and beta by delta_gates, then prep + scan. Fused: prep (with the prologue) + scan
// on the raw q and k. Everything the two write must agree bit for bit. T <= 16 (STEP_MAX_T):
// the token-by-token rule instead, delta_rule_step with and without its prologue, the norms on
// norm_rows (a block of 128 threads a group).
int run_prologue_case(Shape s, int T, int R, uint64_t seed) {
    const bool step = T <= 16;
    ref::Rng r(seed);
    const int ld = 2 * s.Hk * s.dk + s.Hv * s.dv;
    std::vector<float> qkv(size_t(T) * ld), gb(size_t(T) * s.Hv), ga(size_t(T) * s.Hv), dtb(s.Hv), ssa(s.Hv),
        s0(size_t(s.Hv) * s.dk * s.dv);
    for (int t = 0; t < T; t++) {
        const double row_scale = 0.2 + 3.0 * r.uniform();
        for (int i = 0; i < ld; i++) qkv[size_t(t) * ld + i] = float(row_scale * r.normal());
    }
    for (auto& x : gb) x = float(2.0 * r.normal());
    for (auto& x : ga) x = float(2.0 * r.normal());
    for (auto& x : dtb) x = float(r.normal());
    for (auto& x : ssa) x = float(-std::exp(0.5 * r.normal()));
    for (auto& x : s0) x = float(0.5 * r.normal());
    const float eps = 1e-6f, qscale = float(1.0 / std::sqrt(double(s.dk)));
    const size_t nout = size_t(R) * s.Hv * s.dv;

    Bufs b;
    auto args = [&](float* x, float* g, float* beta) { return chunk_args(b, s, T, R, ld, x, g, beta, s0); };
    auto poisoned = [&](size_t n) {
        float* p = b.alloc(n);
        for (size_t i = 0; i < n; i++) p[i] = NAN;
        return p;
    };
    auto run = [&](const DeltaArgs& a) {
        if (step) {
            emu::launch({unsigned(s.Hv), unsigned(s.dv / DELTA_NS), 1}, {128, 1, 1}, [&] {
                if (a.kx && T > 1) delta_rule_step_pro(a);
                else delta_rule_step(a);
            });
            return;
        }
        emu::launch({unsigned(delta_chunks(T)), unsigned(s.Hv), 1}, {256, 1, 1}, [&] {
            if (a.kx) delta_rule_chunk_prep_pro(a);
            else delta_rule_chunk_prep(a);
        });
        emu::launch({unsigned(s.Hv), unsigned(s.dv / DELTA_NS), 1}, {256, 1, 1}, [&] { delta_rule_chunk_scan(a); });
    };

    // Unfused: the norms in place, the gates, then the rule.
    float* xu = b.upload(qkv);
    float *gu = poisoned(gb.size()), *bu = poisoned(gb.size());
    const float *dgb = b.upload(gb), *dga = b.upload(ga), *ddt = b.upload(dtb), *dsa = b.upload(ssa);
    auto l2 = [&](float* x, int rows, float scale) {
        NormArgs n{};
        n.x = x, n.ldx = ld, n.y = x, n.ldy = ld;
        n.rows = rows, n.cols = s.Hk * s.dk, n.group = s.dk;
        n.eps = eps, n.scale = scale, n.l2 = 1;
        const int blocks = rows * s.Hk;
        if (step) {
            emu::launch({unsigned(blocks), 1, 1}, {128, 1, 1}, [&] { norm_rows(n); });
            return;
        }
        emu::launch({unsigned((blocks + NORM_W_GROUPS - 1) / NORM_W_GROUPS), 1, 1}, {32 * NORM_W_GROUPS, 1, 1},
                    [&] { norm_rows_w(n); });
    };
    l2(xu + size_t(T - R) * ld, R, qscale);
    l2(xu + s.Hk * s.dk, T, 1.0f);
    DeltaGatesArgs gt{dgb, s.Hv, dga, s.Hv, ddt, dsa, bu, s.Hv, gu, s.Hv, T, s.Hv};
    emu::launch({4, 1, 1}, {256, 1, 1}, [&] { delta_gates(gt); });
    const DeltaArgs au = args(xu, gu, bu);
    run(au);

    // Fused: raw q and k, the gates computed by the prep (g and beta are its outputs).
    float* xf = b.upload(qkv);
    float *gf = poisoned(gb.size()), *bf = poisoned(gb.size());
    DeltaArgs af = args(xf, gf, bf);
    af.kx = af.k, af.ldkx = af.ldk, af.qx = af.q, af.ldqx = af.ldq;
    af.keps = eps, af.kscale = 1.0f, af.qeps = eps, af.qscale = qscale;
    af.gb = dgb, af.ldgb = s.Hv, af.ga = dga, af.ldga = s.Hv, af.dt_bias = ddt, af.ssm_a = dsa;
    af.beta_out = bf, af.g_out = gf;
    run(af);

    auto differ = [](const float* x, const float* y, size_t n) {
        long long d = 0;
        for (size_t i = 0; i < n; i++) d += std::memcmp(x + i, y + i, 4) != 0;
        return d;
    };
    const long long d_o = differ(au.o, af.o, nout), d_s = differ(au.state, af.state, s0.size());
    const long long d_g = differ(gu, gf, gb.size()) + differ(bu, bf, gb.size());
    const long long d_x = differ(xf, qkv.data(), qkv.size());  // q and k not written
    long long nonfinite = 0;
    for (size_t i = 0; i < nout; i++) nonfinite += !std::isfinite(af.o[i]);
    const bool ok = d_o == 0 && d_s == 0 && d_g == 0 && d_x == 0 && nonfinite == 0;
    std::printf("  %-4s %s prologue Hk=%d Hv=%d dk=%d dv=%d T=%d R=%d: against the unfused launches, %lld outputs, %lld state, "
                "%lld gate values differ; %lld inputs written; %lld non-finite outputs\n",
                ok ? "ok" : "FAIL", step ? "step" : "prep", s.Hk, s.Hv, s.dk, s.dv, T, R, d_o, d_s, d_g, d_x,
                nonfinite);
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    std::printf("delta rule, chunked (prep + scan) on the CPU emulator, bound 1e-3:\n");
    int bad = 0;
    bad += run_case({1, 2, 128, 32}, 130, 130, -2, 1);
    bad += run_case({1, 2, 64, 64}, 100, 100, -2, 2);
    bad += run_prologue_case({2, 4, 128, 32}, 130, 130, 7);
    bad += run_prologue_case({2, 4, 128, 32}, 4, 4, 10);  // a verification batch of k = 3
    if (!quick) {
        bad += run_prologue_case({2, 4, 128, 64}, 1, 1, 11);
        bad += run_prologue_case({1, 2, 64, 32}, 16, 16, 12);
        bad += run_prologue_case({2, 4, 128, 32}, 5, 1, 13);  // a short prompt's last layer: one q row
        bad += run_prologue_case({1, 2, 128, 64}, 70, 1, 8);
        bad += run_prologue_case({1, 1, 128, 32}, 64, 40, 9);
        bad += run_case({2, 4, 128, 64}, 70, 1, -2, 3);
        bad += run_case({1, 1, 128, 32}, 64, 64, -20, 4);
        bad += run_case({1, 2, 64, 32}, 200, 37, -0.02, 5);
        // Nine chunks: each of scan2's two operand sets refilled four times while the other is read.
        bad += run_case({1, 2, 128, 32}, 520, 520, -1, 6);
    }
    std::printf("%s\n", bad ? "FAILED" : "all passed");
    return bad ? 1 : 0;
}
