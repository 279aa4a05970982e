// flash_attn_wg (attention_wg.cuh: causal prefill attention on wgmma) on the CPU emulator of
// lab/gemm/emu: the device code compiled as C++, every thread a fiber, wgmma with both operand
// kinds (A from registers, A from shared memory) performed through their 128-byte-swizzled
// descriptors at a random point between issue and wait, cp.async landing early or late, warps
// released in a random order. Checked against a float64 reference as lab/attention/bench.cu
// checks the GPU: ||o - ref|| / ||ref|| < 5e-3, every written value finite, nothing written
// outside o's rows and head columns.
// Inputs: q and k RMS-normalised per head times a per-dimension gain in [0.5, 3] (peaked scores,
// as after q_norm / k_norm), v ~ N(0, 1), fresh per case. The f16 copies the kernel reads are
// made here as attn_kv_to_f16 makes them (K rows past the visible ones NaN: they must be
// zero-filled or masked; the transposed V zero up to a multiple of 64 keys, NaN after that: it
// must not be read); o NaN-poisoned, its padding columns a sentinel.
// Build and run (from the repository root; ~30 s):
//   c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/attention/wg_emu_test.cpp -o /tmp/attn_wg_emu && /tmp/attn_wg_emu
// Exit code 1 if a check fails (3: the emulator found a deadlock; 4: a bad primitive use).
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <cstring>
#include <memory>

#include "attention_wg.cuh"

namespace {

struct Case {
    int D, H, Hkv, R, q_offset, p_extra, pad;
};

template <int D, bool PIPE>
int run_case(const Case& c, uint64_t seed) {
    ref::Rng rng(seed);
    const int G = c.H / c.Hkv, P = c.q_offset + c.R + c.p_extra, nvis = c.q_offset + c.R;
    const int npad = (nvis + 63) / 64 * 64, ldvt = (P + 63) / 64 * 64 + 8;
    const long long ldq = (long long)c.H * D + c.pad, ldk = (long long)c.Hkv * D + c.pad, ldo = ldq;
    const long long ld16 = (long long)c.Hkv * D + 8;
    const float nan = std::nanf("");
    std::vector<float> q(size_t(c.R) * ldq, nan), k(size_t(P) * ldk, nan), v(size_t(P) * ldk, nan);
    std::vector<double> gq(D), gk(D);
    for (int i = 0; i < D; i++) gq[i] = 0.5 + 2.5 * rng.uniform(), gk[i] = 0.5 + 2.5 * rng.uniform();
    auto rms = [&](std::vector<float>& x, int rows, long long ld, int heads, const std::vector<double>& g) {
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < heads; h++) {
                float* y = &x[size_t(r) * ld + size_t(h) * D];
                double ss = 0;
                for (int i = 0; i < D; i++) y[i] = float(rng.normal()), ss += double(y[i]) * y[i];
                const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
                for (int i = 0; i < D; i++) y[i] = float(y[i] * inv * g[i]);
            }
    };
    rms(q, c.R, ldq, c.H, gq);
    rms(k, nvis, ldk, c.Hkv, gk);
    for (int r = 0; r < nvis; r++)
        for (int i = 0; i < c.Hkv * D; i++) v[size_t(r) * ldk + i] = float(rng.normal());
    const float scale = float(1.0 / std::sqrt(double(D)));

    // The f16 copies, as attn_kv_to_f16 writes them (16-byte aligned buffers).
    const uint16_t hnan = 0x7e00;
    std::vector<__half> k16(size_t(P) * ld16 + 8, __half{hnan}), vt(size_t(c.Hkv) * D * ldvt + 8, __half{hnan});
    for (int r = 0; r < nvis; r++)
        for (int i = 0; i < c.Hkv * D; i++) k16[size_t(r) * ld16 + i] = __float2half_rn(k[size_t(r) * ldk + i]);
    for (int ch = 0; ch < c.Hkv * D; ch++)
        for (int r = 0; r < npad; r++) vt[size_t(ch) * ldvt + r] = __float2half_rn(r < nvis ? v[size_t(r) * ldk + ch] : 0.f);

    const float sentinel = 12345.f;
    std::vector<float> o(size_t(c.R) * ldo + 64, nan);
    for (int r = 0; r < c.R; r++)
        for (long long i = (long long)c.H * D; i < ldo; i++) o[size_t(r) * ldo + i] = sentinel;
    for (size_t i = size_t(c.R) * ldo; i < o.size(); i++) o[i] = sentinel;

    AttnArgs a{};
    a.q = q.data(), a.ldq = ldq, a.k = k.data(), a.ldk = ldk, a.v = v.data(), a.ldv = ldk, a.o = o.data(), a.ldo = ldo;
    a.R = c.R, a.P = P, a.H = c.H, a.Hkv = c.Hkv, a.d = D, a.q_offset = c.q_offset, a.scale = scale;
    a.n_split = 1, a.kv_chunk = 0, a.ldvt = ldvt;
    a.k16 = k16.data(), a.v16 = vt.data(), a.ld16 = ld16;
    const unsigned nqb = unsigned((c.R * G + ATTN_WG_BM - 1) / ATTN_WG_BM);
    emu::launch({nqb, unsigned(c.Hkv), 1}, {256, 1, 1}, [&] { attn_wg::prefill<D, PIPE>(a); });

    // float64 reference.
    double num = 0, den = 0;
    long long nonfinite = 0, clobbered = 0;
    double worst = 0;
    int wr = -1, wh = -1;
    for (int r = 0; r < c.R; r++)
        for (int h = 0; h < c.H; h++) {
            const int n = c.q_offset + r + 1, kvh = h / G;
            std::vector<double> s(n), acc(D, 0.0);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double dot = 0;
                for (int i = 0; i < D; i++) dot += double(q[size_t(r) * ldq + h * D + i]) * k[size_t(j) * ldk + kvh * D + i];
                s[j] = dot * scale;
                mx = std::max(mx, s[j]);
            }
            for (int j = 0; j < n; j++) {
                const double e = std::exp(s[j] - mx);
                sum += e;
                for (int i = 0; i < D; i++) acc[i] += e * v[size_t(j) * ldk + kvh * D + i];
            }
            double rn = 0, rd = 0;
            for (int i = 0; i < D; i++) {
                const double want = acc[i] / sum, got = o[size_t(r) * ldo + h * D + i];
                if (!std::isfinite(got)) {
                    nonfinite++;
                    continue;
                }
                rn += (got - want) * (got - want);
                rd += want * want;
            }
            num += rn, den += rd;
            if (rd > 0 && std::sqrt(rn / rd) > worst) worst = std::sqrt(rn / rd), wr = r, wh = h;
        }
    for (int r = 0; r < c.R; r++)
        for (long long i = (long long)c.H * D; i < ldo; i++) clobbered += o[size_t(r) * ldo + i] != sentinel;
    for (size_t i = size_t(c.R) * ldo; i < o.size(); i++) clobbered += o[i] != sentinel;
    const double err = std::sqrt(num / std::max(den, 1e-300));
    const bool ok = err < 5e-3 && nonfinite == 0 && clobbered == 0;
    std::printf("  %-4s %-6s d=%d H=%d Hkv=%d R=%d q_offset=%d P=%d ld+%d  rel %.2e (worst row %d head %d: %.2e)%s%s\n",
                ok ? "ok" : "FAIL", PIPE ? "pipe" : "serial", D, c.H, c.Hkv, c.R, c.q_offset, P, c.pad, err, wr, wh, worst,
                nonfinite ? "  NON-FINITE" : "", clobbered ? "  CLOBBERED" : "");
    return ok ? 0 : 1;
}

// Both forms of the kernel on the same inputs (the engine's, PIPE, and the serial one).
int run(const Case& c, uint64_t seed) {
    if (c.D == 256) return run_case<256, true>(c, seed) + run_case<256, false>(c, seed);
    return run_case<128, true>(c, seed) + run_case<128, false>(c, seed);
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    std::printf("flash_attn_wg (wgmma prefill attention) on the CPU emulator, bound 5e-3:\n");
    int bad = 0;
    uint64_t seed = 1;
    // The model's heads (16:2, d 256): one tile, a diagonal across tiles, an offset cache
    // (a second prompt chunk), a padding warpgroup (R * G not a multiple of 128).
    bad += run({256, 16, 2, 7, 0, 0, 0}, seed++);
    bad += run({256, 16, 2, 24, 37, 5, 0}, seed++);
    bad += run({128, 16, 2, 40, 100, 70, 4}, seed++);  // ld not a multiple of 8: scalar q and o paths
    if (!quick) {
        bad += run({256, 16, 2, 130, 0, 0, 0}, seed++);
        bad += run({128, 4, 2, 100, 37, 0, 0}, seed++);  // G = 2
        bad += run({128, 3, 3, 70, 0, 1, 0}, seed++);    // G = 1
        bad += run({128, 16, 2, 1, 200, 3, 0}, seed++);  // one row at depth
    }
    std::printf("%s\n", bad ? "FAILED" : "all ok");
    return bad ? 1 : 0;
}
