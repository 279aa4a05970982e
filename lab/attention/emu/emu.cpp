// CPU emulation check of attention.cu (no GPU needed): runs the real kernel source, with the PTX
// helpers emulated (shim.h), on small problems and compares with a double-precision reference.
// Build and run: lab/attention/emu/run.sh
#include "shim.h"
#include "attention_emu.inc"  // attention.cu through gen.py
#include "../variants.cu"     // the variants the engine does not load

#include <string>
#include <thread>

struct Problem {
    int R, P, H, Hkv, d, q_offset;
    long long ldq, ldk, ldv, ldo;
    float scale;
    std::vector<float> q, k, v;
    int pvis() const { return q_offset + R; }
    int rows() const { return R * (H / Hkv); }
};

static Problem make(int R, int P_extra, int H, int Hkv, int d, int q0, int pad, unsigned seed) {
    Problem p{R, q0 + R + P_extra, H, Hkv, d, q0, (long long)H * d + pad, (long long)Hkv * d + pad,
              (long long)Hkv * d + pad, (long long)H * d + pad, (float)(1.0 / std::sqrt((double)d))};
    std::mt19937 g(seed);
    std::normal_distribution<float> n01;
    std::uniform_real_distribution<float> gain(0.5f, 3.0f);
    const float nan = std::nanf("");
    std::vector<float> gq(d), gk(d);
    for (int c = 0; c < d; ++c) gq[c] = gain(g), gk[c] = gain(g);
    auto rms = [&](std::vector<float>& x, int rows, int all_rows, long long ld, int heads, std::vector<float>& gn) {
        x.assign((size_t)all_rows * ld, nan);
        for (int r = 0; r < rows; ++r)
            for (int h = 0; h < heads; ++h) {
                float* y = &x[(size_t)r * ld + (size_t)h * d];
                double ss = 0;
                for (int c = 0; c < d; ++c) y[c] = n01(g), ss += (double)y[c] * y[c];
                const float inv = (float)(1.0 / std::sqrt(ss / d + 1e-6));
                for (int c = 0; c < d; ++c) y[c] *= inv * gn[c];
            }
    };
    rms(p.q, R, R, p.ldq, H, gq);
    rms(p.k, p.pvis(), p.P, p.ldk, Hkv, gk);
    p.v.assign((size_t)p.P * p.ldv, nan);
    for (int r = 0; r < p.pvis(); ++r)
        for (int c = 0; c < Hkv * d; ++c) p.v[(size_t)r * p.ldv + c] = n01(g);
    return p;
}

static std::vector<double> reference(const Problem& p) {
    std::vector<double> out((size_t)p.R * p.H * p.d);
    const int G = p.H / p.Hkv;
    for (int r = 0; r < p.R; ++r)
        for (int h = 0; h < p.H; ++h) {
            const int n = p.q_offset + r + 1, kvh = h / G;
            std::vector<double> s(n);
            double mx = -INFINITY;
            for (int j = 0; j < n; ++j) {
                double dot = 0;
                for (int c = 0; c < p.d; ++c)
                    dot += (double)p.q[(size_t)r * p.ldq + h * p.d + c] * p.k[(size_t)j * p.ldk + kvh * p.d + c];
                s[j] = dot * p.scale;
                mx = std::max(mx, s[j]);
            }
            double sum = 0;
            std::vector<double> acc(p.d, 0.0);
            for (int j = 0; j < n; ++j) {
                const double e = std::exp(s[j] - mx);
                sum += e;
                for (int c = 0; c < p.d; ++c) acc[c] += e * p.v[(size_t)j * p.ldv + kvh * p.d + c];
            }
            for (int c = 0; c < p.d; ++c) out[((size_t)r * p.H + h) * p.d + c] = acc[c] / sum;
        }
    return out;
}

enum Kind { P8, P4, H8, H4, DEC };
typedef void (*KFn)(AttnArgs);
static KFn kfn(Kind k, int d) {
    const int i = d == 32 ? 0 : d == 64 ? 1 : d == 128 ? 2 : 3;
    static KFn t[5][4] = {
        {flash_attn_d32, flash_attn_d64, flash_attn_d128, flash_attn_d256},
        {flash_attn_w4_d32, flash_attn_w4_d64, flash_attn_w4_d128, flash_attn_w4_d256},
        {flash_attn_h_d32, flash_attn_h_d64, flash_attn_h_d128, flash_attn_h_d256},
        {flash_attn_h_w4_d32, flash_attn_h_w4_d64, flash_attn_h_w4_d128, flash_attn_h_w4_d256},
        {flash_decode_d32, flash_decode_d64, flash_decode_d128, flash_decode_d256},
    };
    return t[k][i];
}

struct Variant {
    std::string name;
    Kind kind;
    int n_split, kv_chunk;
    // The position as device data (AttnArgs.pos), as the engine passes it: q_offset holds at most
    // 3 rows of offset, *pos the rest.
    bool dev_pos = false;
};

static int fails = 0, checks = 0;

static void run(const Problem& p, const std::vector<double>& ref, const Variant& V, bool deferred) {
    emu::g_async_deferred = deferred;
    const float nan = std::nanf("");
    std::vector<float> o((size_t)p.R * p.ldo + 64, 7777.0f);
    for (int r = 0; r < p.R; ++r)
        for (int c = 0; c < p.H * p.d; ++c) o[(size_t)r * p.ldo + c] = nan;
    const size_t wsn = (size_t)std::max(V.n_split, 1) * p.R * p.H * (p.d + 2);
    std::vector<float> ws(wsn, nan);
    std::vector<__half> k16((size_t)p.pvis() * p.Hkv * p.d), v16(k16.size());
    for (auto& x : k16) x.v = (_Float16)nan;
    for (auto& x : v16) x.v = (_Float16)nan;
    AttnArgs a{};
    a.q = p.q.data(), a.ldq = p.ldq, a.k = p.k.data(), a.ldk = p.ldk, a.v = p.v.data(), a.ldv = p.ldv;
    a.o = o.data(), a.ldo = p.ldo, a.R = p.R, a.P = p.P, a.H = p.H, a.Hkv = p.Hkv, a.d = p.d, a.q_offset = p.q_offset;
    a.scale = p.scale, a.n_split = V.n_split, a.kv_chunk = V.kv_chunk, a.ws = ws.data();
    a.k16 = k16.data(), a.v16 = v16.data(), a.ld16 = (long long)p.Hkv * p.d;
    int pos = 0;
    if (V.dev_pos) {
        a.q_offset = std::min(p.q_offset, 3);
        pos = p.q_offset - a.q_offset;
        a.pos = &pos;
    }
    if (V.kind == H8 || V.kind == H4) {
        const long long n8 = (long long)p.pvis() * p.Hkv * p.d / 8;
        // At most 3 blocks: the kernel strides, as it must when the engine caps its grid.
        emu::launch(attn_kv_to_f16, dim3s{unsigned(std::min<long long>((n8 + 255) / 256, 3)), 2, 1}, 256, a);
    }
    if (V.kind == DEC) {
        emu::launch(kfn(DEC, p.d), dim3s{unsigned(V.n_split), unsigned(p.Hkv), 1}, 256, a);
    } else {
        const int nw = (V.kind == P8 || V.kind == H8) ? 8 : 4, bm = 16 * nw;
        emu::launch(kfn(V.kind, p.d), dim3s{unsigned((p.rows() + bm - 1) / bm), unsigned(p.Hkv), unsigned(V.n_split)},
                    32 * nw, a);
    }
    if (V.n_split > 1) {
        emu::launch(flash_attn_combine, dim3s{unsigned(p.R * p.H), 1, 1}, ATTN_COMBINE_THREADS, a);
    }
    long long bad = 0, clob = 0;
    double num = 0, den = 0, worst = -1;
    int wr = -1, wh = -1, wc = -1;
    for (int r = 0; r < p.R; ++r)
        for (long long c = 0; c < p.ldo; ++c) {
            const float x = o[(size_t)r * p.ldo + c];
            if (c >= (long long)p.H * p.d) {
                clob += x != 7777.0f;
                continue;
            }
            if (!std::isfinite(x)) ++bad;
            const double rf = ref[(size_t)r * p.H * p.d + c];
            const double e = std::isfinite(x) ? std::fabs(x - rf) : INFINITY;
            num += e * e, den += rf * rf;
            if (e > worst) worst = e, wr = r, wh = (int)(c / p.d), wc = (int)(c % p.d);
        }
    for (size_t j = (size_t)p.R * p.ldo; j < o.size(); ++j) clob += o[j] != 7777.0f;
    const double rel = std::sqrt(num / den);
    const bool ok = bad == 0 && clob == 0 && rel < 5e-3;
    ++checks;
    if (!ok) ++fails;
    std::printf("%s d%-3d R%-3d q0 %-4d P %-4d H%-2d/%-2d ld+%lld %-14s split %d chunk %-3d %s rel %.2e nonfinite %lld "
                "clobbered %lld worst r%d h%d c%d\n",
                ok ? "ok  " : "FAIL", p.d, p.R, p.q_offset, p.P, p.H, p.Hkv, p.ldq - (long long)p.H * p.d, V.name.c_str(),
                V.n_split, V.kv_chunk, deferred ? "deferred" : "eager   ", rel, bad, clob, wr, wh, wc);
    std::fflush(stdout);
}

// attn_kv_to_f16 with ldvt > 0 (the wgmma kernel's copies): K rows as before, V transposed with
// rows of ldvt keys, zero from the visible keys up to a multiple of 64, nothing written after
// that (NaN stays); the position from the device, the grid capped at 3 blocks (the kernel strides).
static void check_vt(const Problem& p) {
    auto r64 = [](long long x) { return (int)((x + 63) / 64 * 64); };
    const int width = p.Hkv * p.d, nvis = std::min(p.P, p.pvis()), npad = r64(nvis), ldvt = r64(p.P) + 8;
    const _Float16 hnan = (_Float16)std::nanf("");
    std::vector<__half> k16((size_t)nvis * width), vt((size_t)width * ldvt);
    for (auto& x : k16) x.v = hnan;
    for (auto& x : vt) x.v = hnan;
    AttnArgs a{};
    a.q = p.q.data(), a.ldq = p.ldq, a.k = p.k.data(), a.ldk = p.ldk, a.v = p.v.data(), a.ldv = p.ldv;
    a.R = p.R, a.P = p.P, a.H = p.H, a.Hkv = p.Hkv, a.d = p.d, a.scale = p.scale, a.n_split = 1;
    a.k16 = k16.data(), a.v16 = vt.data(), a.ld16 = width, a.ldvt = ldvt;
    a.q_offset = std::min(p.q_offset, 3);
    int pos = p.q_offset - a.q_offset;
    a.pos = &pos;
    emu::launch(attn_kv_to_f16, dim3s{3, 2, 1}, 256, a);
    long long bad = 0;
    for (int r = 0; r < nvis; ++r)
        for (int c = 0; c < width; ++c) {
            bad += (float)k16[(size_t)r * width + c].v != (float)(_Float16)p.k[(size_t)r * p.ldk + c];
        }
    for (int c = 0; c < width; ++c)
        for (int r = 0; r < ldvt; ++r) {
            const _Float16 got = vt[(size_t)c * ldvt + r].v;
            if (r < nvis) bad += (float)got != (float)(_Float16)p.v[(size_t)r * p.ldv + c];
            else if (r < npad) bad += (float)got != 0.f;
            else bad += !std::isnan((float)got);
        }
    ++checks;
    if (bad) ++fails;
    std::printf("%s d%-3d R%-3d q0 %-4d P %-4d H%-2d/%-2d kv_to_f16, V transposed (ldvt %d): %lld wrong values\n",
                bad ? "FAIL" : "ok  ", p.d, p.R, p.q_offset, p.P, p.H, p.Hkv, ldvt, bad);
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    struct Cfg {
        int R, P_extra, H, Hkv, d, q0, pad;
    };
    std::vector<Cfg> cfgs = {
        {20, 0, 16, 2, 256, 0, 0},  {20, 3, 16, 2, 256, 37, 4}, {1, 0, 16, 2, 256, 100, 0}, {7, 0, 8, 4, 64, 37, 0},
        {40, 0, 8, 4, 64, 0, 0},    {9, 2, 12, 4, 32, 70, 1},   {1, 0, 8, 4, 128, 0, 0},    {70, 0, 4, 4, 32, 3, 0},
        {5, 0, 16, 2, 128, 150, 4}, {130, 0, 2, 2, 32, 0, 0},   {24, 0, 16, 2, 256, 90, 0},
        // Decode against a cache much larger than what it holds (the engine's whole-cache views).
        {1, 500, 16, 2, 256, 100, 0}, {1, 300, 16, 2, 256, 0, 0},
    };
    if (quick) cfgs.resize(3);
    unsigned seed = 1;
    emu::g_rng.seed(argc > 2 ? std::atoi(argv[2]) : 7);
    for (const Cfg& c : cfgs) {
        const Problem p = make(c.R, c.P_extra, c.H, c.Hkv, c.d, c.q0, c.pad, seed++);
        const auto ref = reference(p);
        auto r64 = [](long long x) { return (int)((x + 63) / 64 * 64); };
        std::vector<Variant> vs = {
            {"f32-w8", P8, 1, 64},
            {"f32-w4", P4, 1, 64},
            {"f16-w8", H8, 1, 64},
            {"f16-w4", H4, 1, 64},
            {"f32-w8 s3x64", P8, 3, 64},
            {"f16-w4 s2", H4, 2, r64((p.pvis() + 1) / 2)},
            {"f32-w8 pos", P8, 1, 64, true},
            {"f16-w4 pos", H4, 1, 64, true},  // the engine's f16 launch: device position, capped conversion grid
            // The engine's short batches at depth (a verification): key splits from the device position.
            {"f32-w8 pos s5", P8, 5, 0, true},
            {"f16-w4 pos s3", H4, 3, 0, true},
        };
        if (p.rows() <= 8) {
            vs.push_back({"decode 1", DEC, 1, 64});
            vs.push_back({"decode s2x64", DEC, 2, 64});
            vs.push_back({"decode s3", DEC, 3, r64((p.pvis() + 2) / 3)});
            // The engine's decode: a grid fixed by the cache capacity, chunks from the device.
            vs.push_back({"decode pos s3", DEC, 3, 0, true});
            vs.push_back({"decode pos s9", DEC, 9, 0, true});
        }
        check_vt(p);
        for (const Variant& v : vs) {
            run(p, ref, v, false);
            if (v.kind == H8 || v.kind == H4) run(p, ref, v, true);
        }
    }
    std::printf("emu: %d checks, %d failed, %lld collectives\n", checks, fails, emu::g_collectives);
    return fails ? 1 : 0;
}
