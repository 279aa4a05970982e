// Host-side reference for the GEMM lab: exact f16/bf16 conversions, random GGUF weights with sane
// scales, the reference dequantisation (the same f32 operations, in the same order, as the Rust
// reference in crates/gguf/src/quants, so results must match bit for bit), routing generators
// and a float64 GEMM. Plain C++17; used by bench.cu (nvcc) and by the CPU emulator (g++).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace ref {

// ---- formats ---------------------------------------------------------------------------------
enum : int {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12,
    Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30, MXFP4 = 39
};
// Every type the kernels take, in the order the lab runs them.
constexpr int ALL_TYPES[] = {Q4_K, Q5_K, Q6_K, Q8_0, BF16, F16, F32, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K};
inline const char* type_name(int t) {
    switch (t) {
        case F32: return "f32";
        case F16: return "f16";
        case BF16: return "bf16";
        case Q8_0: return "q8_0";
        case Q4_K: return "q4_k";
        case Q5_K: return "q5_k";
        case Q6_K: return "q6_k";
        case Q4_0: return "q4_0";
        case Q4_1: return "q4_1";
        case Q5_0: return "q5_0";
        case Q5_1: return "q5_1";
        case IQ4_NL: return "iq4_nl";
        case IQ4_XS: return "iq4_xs";
        case MXFP4: return "mxfp4";
        case Q2_K: return "q2_k";
        case Q3_K: return "q3_k";
    }
    return "?";
}
inline int block_elems(int t) {
    switch (t) {
        case Q4_K: case Q5_K: case Q6_K: case Q2_K: case Q3_K: case IQ4_XS: return 256;
        case Q8_0: case Q4_0: case Q4_1: case Q5_0: case Q5_1: case IQ4_NL: case MXFP4: return 32;
    }
    return 1;
}
inline int block_bytes(int t) {
    switch (t) {
        case F32: return 4;
        case F16: return 2;
        case BF16: return 2;
        case Q8_0: return 34;
        case Q4_K: return 144;
        case Q5_K: return 176;
        case Q6_K: return 210;
        case Q4_0: return 18;
        case Q4_1: return 20;
        case Q5_0: return 22;
        case Q5_1: return 24;
        case IQ4_NL: return 18;
        case IQ4_XS: return 136;
        case MXFP4: return 17;
        case Q2_K: return 84;
        case Q3_K: return 110;
    }
    return 0;
}
inline int64_t row_bytes(int t, int64_t k) { return k / block_elems(t) * block_bytes(t); }

// ---- f16 / bf16 --------------------------------------------------------------------------------
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline double hf16_to_f64(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = std::ldexp(double(m), -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp(double(m + 1024), e - 25);
    return s ? -v : v;
}
inline float hf16_to_f32(uint16_t h) { return float(hf16_to_f64(h)); }
// Round to nearest even, overflow to infinity, NaN -> 0x7e00 (with sign).
inline uint16_t hf64_to_f16(double x) {
    if (std::isnan(x)) return std::signbit(x) ? 0xfe00 : 0x7e00;
    const uint16_t s = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    if (a >= 65520.0) return s | 0x7c00;
    int e;
    std::frexp(a, &e);                       // a = f * 2^e, f in [0.5, 1)
    const int ex = (a == 0.0) ? -30 : e - 1;  // unbiased exponent of a
    const int qexp = ex >= -14 ? ex - 10 : -24;
    const double r = std::nearbyint(std::ldexp(a, -qexp));  // default rounding: to nearest even
    const double v = std::ldexp(r, qexp);
    if (v < std::ldexp(1.0, -14)) return s | uint16_t(r);   // subnormal (or zero)
    std::frexp(v, &e);
    const int E = e - 1;
    const int mant = int(std::ldexp(v, -E) * 1024.0) - 1024;
    return s | uint16_t(((E + 15) << 10) | mant);
}
inline uint16_t hf32_to_f16(float x) { return hf64_to_f16(double(x)); }
inline float hbf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }
inline uint16_t hf32_to_bf16(float x) {
    const uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- RNG ----------------------------------------------------------------------------------------
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t u32() { return uint32_t(next() >> 32); }
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double normal() {
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    int below(int n) { return int(next() % uint64_t(n)); }
};

// ---- random weights -----------------------------------------------------------------------------
// `rows` rows of K elements. K-quants: random quants and packed scales, f16 d (and dmin) drawn so
// that every nonzero d*scale is a normal f16 and elements are O(0.1). Q8_0: random i8, d ~ 1e-3.
// Floats: N(0, 0.05), never exactly zero.
inline std::vector<uint8_t> random_weights(int t, int64_t rows, int64_t K, Rng& rng) {
    const int64_t rb = row_bytes(t, K);
    std::vector<uint8_t> w(size_t(rows * rb));
    for (size_t i = 0; i < w.size(); i += 8) {
        const uint64_t r = rng.next();
        std::memcpy(w.data() + i, &r, std::min<size_t>(8, w.size() - i));
    }
    auto put16 = [&](uint8_t* p, uint16_t v) {
        p[0] = uint8_t(v);
        p[1] = uint8_t(v >> 8);
    };
    const int64_t nb = rows * (K / block_elems(t));
    for (int64_t i = 0; i < nb; i++) {
        uint8_t* b = w.data() + i * block_bytes(t);
        switch (t) {
            case Q4_K:
            case Q5_K:
                put16(b, hf64_to_f16(2e-4 * (1.0 + rng.uniform())));
                put16(b + 2, hf64_to_f16(2e-4 * (1.0 + rng.uniform())));
                break;
            case Q6_K: put16(b + 208, hf64_to_f16(1e-4 * (1.0 + 2.0 * rng.uniform()))); break;
            case Q8_0: put16(b, hf64_to_f16(1e-3 * (0.5 + rng.uniform()))); break;
            case Q4_0:
            case Q5_0:
            case IQ4_NL: put16(b, hf64_to_f16(1e-2 * (0.5 + rng.uniform()))); break;
            case Q4_1:
            case Q5_1:
                put16(b, hf64_to_f16(1e-2 * (0.5 + rng.uniform())));
                put16(b + 2, hf64_to_f16(-0.1 * rng.uniform()));
                break;
            case IQ4_XS: put16(b, hf64_to_f16(1e-4 * (0.5 + rng.uniform()))); break;
            // e in 118..123: scales 2^-10 .. 2^-5, inside the f16 range as the f16 decode needs.
            case MXFP4: b[0] = uint8_t(118 + rng.below(6)); break;
            case Q2_K:
                put16(b + 80, hf64_to_f16(2e-3 * (1.0 + rng.uniform())));
                put16(b + 82, hf64_to_f16(2e-3 * (1.0 + rng.uniform())));
                break;
            case Q3_K: put16(b + 108, hf64_to_f16(1e-3 * (0.5 + rng.uniform()))); break;
            case F16: {
                double v;
                do v = 0.05 * rng.normal(); while (v == 0.0);
                put16(b, hf64_to_f16(v));
                if (b[0] == 0 && (b[1] & 0x7f) == 0) b[0] = 1;
                break;
            }
            case BF16: {
                double v;
                do v = 0.05 * rng.normal(); while (v == 0.0);
                put16(b, hf32_to_bf16(float(v)));
                if (b[0] == 0 && (b[1] & 0x7f) == 0) b[0] = 1;
                break;
            }
            case F32: {
                float v;
                do v = float(0.05 * rng.normal()); while (v == 0.0f);
                std::memcpy(b, &v, 4);
                break;
            }
        }
    }
    return w;
}

// ---- reference dequantisation (mirrors crates/gguf/src/quants; f32, no FMA) ---------------------
inline float half_at(const uint8_t* b) { return hf16_to_f32(uint16_t(b[0] | (b[1] << 8))); }
inline void scale_min(int j, const uint8_t* s, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
// Products are stored to volatile floats so that no compiler contracts them into an FMA.
inline float mul(float a, float b) {
    volatile float r = a * b;
    return r;
}
inline float sub(float a, float b) {
    volatile float r = a - b;
    return r;
}
inline float add(float a, float b) {
    volatile float r = a + b;
    return r;
}
inline void dequant_row_small(int t, const uint8_t* src, int64_t K, float* y);
inline void dequant_row(int t, const uint8_t* src, int64_t K, float* y) {
    switch (t) {
        case F32:
            for (int64_t i = 0; i < K; i++) std::memcpy(y + i, src + 4 * i, 4);
            return;
        case F16:
            for (int64_t i = 0; i < K; i++) y[i] = hf16_to_f32(uint16_t(src[2 * i] | (src[2 * i + 1] << 8)));
            return;
        case BF16:
            for (int64_t i = 0; i < K; i++) y[i] = hbf16_to_f32(uint16_t(src[2 * i] | (src[2 * i + 1] << 8)));
            return;
        case Q8_0:
            for (int64_t bi = 0; bi < K / 32; bi++) {
                const uint8_t* b = src + 34 * bi;
                const float d = half_at(b);
                for (int l = 0; l < 32; l++) y[32 * bi + l] = mul(float(int8_t(b[2 + l])), d);
            }
            return;
        case Q4_K:
        case Q5_K:
            for (int64_t bi = 0; bi < K / 256; bi++) {
                const bool five = t == Q5_K;
                const uint8_t* b = src + (five ? 176 : 144) * bi;
                const float d = half_at(b), dmin = half_at(b + 2);
                const uint8_t* sc = b + 4;
                const uint8_t* qh = b + 16;
                const uint8_t* qs = b + (five ? 48 : 16);
                float* out = y + 256 * bi;
                for (int c = 0; c < 4; c++) {
                    int s1, m1, s2, m2;
                    scale_min(2 * c, sc, s1, m1);
                    scale_min(2 * c + 1, sc, s2, m2);
                    const float d1 = mul(d, float(s1)), mm1 = mul(dmin, float(m1));
                    const float d2 = mul(d, float(s2)), mm2 = mul(dmin, float(m2));
                    for (int l = 0; l < 32; l++) {
                        int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
                        if (five) {
                            lo += (qh[l] >> (2 * c)) & 1 ? 16 : 0;
                            hi += (qh[l] >> (2 * c + 1)) & 1 ? 16 : 0;
                        }
                        out[64 * c + l] = sub(mul(d1, float(lo)), mm1);
                        out[64 * c + 32 + l] = sub(mul(d2, float(hi)), mm2);
                    }
                }
            }
            return;
        case Q6_K:
            for (int64_t bi = 0; bi < K / 256; bi++) {
                const uint8_t* b = src + 210 * bi;
                const float d = half_at(b + 208);
                for (int h = 0; h < 2; h++) {
                    const uint8_t* ql = b + 64 * h;
                    const uint8_t* qh = b + 128 + 32 * h;
                    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
                    float* out = y + 256 * bi + 128 * h;
                    for (int l = 0; l < 32; l++) {
                        const int is = l / 16;
                        const int q1 = int((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                        const int q2 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                        out[l] = mul(mul(d, float(sc[is + 0])), float(q1));
                        out[l + 32] = mul(mul(d, float(sc[is + 2])), float(q2));
                        out[l + 64] = mul(mul(d, float(sc[is + 4])), float(q3));
                        out[l + 96] = mul(mul(d, float(sc[is + 6])), float(q4));
                    }
                }
            }
            return;
        default: dequant_row_small(t, src, K, y); return;
    }
}

// The legacy, codebook and low-bit K formats (crates/gguf/src/quants/{legacy,codebook,k_low}.rs).
inline void dequant_row_small(int t, const uint8_t* src, int64_t K, float* y) {
    static const int8_t iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const int8_t mx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int be = block_elems(t), bb = block_bytes(t);
    for (int64_t bi = 0; bi < K / be; bi++) {
        const uint8_t* b = src + bb * bi;
        float* out = y + be * bi;
        if (be == 32) {
            const bool five = t == Q5_0 || t == Q5_1, hasm = t == Q4_1 || t == Q5_1;
            const int qs = t == MXFP4 ? 1 : t == Q4_0 || t == IQ4_NL ? 2 : t == Q4_1 ? 4 : t == Q5_0 ? 6 : 8;
            uint32_t qh = 0;
            if (five) std::memcpy(&qh, b + (t == Q5_0 ? 2 : 4), 4);
            float d;
            if (t == MXFP4) {
                const uint32_t e = b[0];
                d = bits_f32(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
            } else {
                d = half_at(b);
            }
            const float m = hasm ? half_at(b + 2) : 0.0f;
            for (int l = 0; l < 32; l++) {
                const int q = ((b[qs + (l & 15)] >> (4 * (l >> 4))) & 15) | (five ? int((qh >> l) & 1) << 4 : 0);
                switch (t) {
                    case Q4_0: out[l] = mul(float(q - 8), d); break;
                    case Q5_0: out[l] = mul(float(q - 16), d); break;
                    case Q4_1:
                    case Q5_1: out[l] = add(mul(float(q), d), m); break;
                    case IQ4_NL: out[l] = mul(d, float(iq4[q])); break;
                    case MXFP4: out[l] = mul(float(mx[q]), d); break;
                }
            }
        } else if (t == IQ4_XS) {
            const float d = half_at(b);
            const int sh = b[2] | (b[3] << 8);
            for (int ib = 0; ib < 8; ib++) {
                const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
                const float dl = mul(d, float(ls - 32));
                for (int l = 0; l < 32; l++) out[32 * ib + l] = mul(dl, float(iq4[(b[8 + 16 * ib + (l & 15)] >> (4 * (l >> 4))) & 15]));
            }
        } else {
            // Q2_K / Q3_K: element 128n + 32j + l, group 8n + 2j + l/16.
            for (int e = 0; e < 256; e++) {
                const int n = e / 128, j = (e / 32) % 4, l = e % 32, g = 8 * n + 2 * j + l / 16;
                if (t == Q2_K) {
                    const float dl = mul(half_at(b + 80), float(b[g] & 15)), ml = mul(half_at(b + 82), float(b[g] >> 4));
                    out[e] = sub(mul(dl, float((b[16 + 32 * n + l] >> (2 * j)) & 3)), ml);
                } else {
                    const uint8_t* s = b + 96;
                    const int sc = (g < 8 ? (s[g] & 15) : (s[g - 8] >> 4)) | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
                    const float dl = mul(half_at(b + 108), float(sc - 32));
                    const int q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) - ((b[l] >> (4 * n + j)) & 1 ? 0 : 4);
                    out[e] = mul(dl, float(q));
                }
            }
        }
    }
}

// ---- routing --------------------------------------------------------------------------------------
// ids [T, k]: each token picks k distinct experts uniformly from E ("random"), or experts
// 0..k-1 ("first-k": every pair lands on k experts, which then hold T rows each).
inline std::vector<int32_t> route_random(int T, int k, int E, Rng& rng) {
    std::vector<int32_t> ids(size_t(T) * k);
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = rng.below(E);
                dup = false;
                for (int i = 0; i < j; i++) dup |= ids[size_t(t) * k + i] == e;
            } while (dup);
            ids[size_t(t) * k + j] = e;
        }
    }
    return ids;
}
inline std::vector<int32_t> route_first_k(int T, int k) {
    std::vector<int32_t> ids(size_t(T) * k);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) ids[size_t(t) * k + j] = j;
    return ids;
}

// Host version of what moe_route computes: stable sort of pairs by expert, tiles of bm.
struct Routing {
    std::vector<int32_t> counts, sorted, tile_expert, tile_start, tile_rows;
    int bad = 0, uncovered = 0;
};
inline Routing route_host(const std::vector<int32_t>& ids, int E, int bm, int max_tiles) {
    Routing r;
    r.counts.assign(E, 0);
    for (int32_t e : ids) {
        if (e >= 0 && e < E) r.counts[e]++;
        else r.bad++;
    }
    std::vector<int> off(E + 1, 0);
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + r.counts[e];
    r.sorted.assign(ids.size(), -1);
    std::vector<int> fill(off.begin(), off.end() - 1);
    for (size_t p = 0; p < ids.size(); p++) {
        const int e = ids[p];
        if (e >= 0 && e < E) r.sorted[fill[e]++] = int32_t(p);
    }
    r.tile_expert.assign(max_tiles, -1);
    r.tile_start.assign(max_tiles, 0);
    r.tile_rows.assign(max_tiles, 0);
    int t = 0;
    for (int e = 0; e < E; e++) {
        for (int i = 0; i * bm < r.counts[e]; i++, t++) {
            const int rows = std::min(bm, r.counts[e] - i * bm);
            if (t < max_tiles) {
                r.tile_expert[t] = e;
                r.tile_start[t] = off[e] + i * bm;
                r.tile_rows[t] = rows;
            } else {
                r.uncovered += rows;
            }
        }
    }
    return r;
}

// ---- float64 reference GEMM ---------------------------------------------------------------------
// y[m, col(n)] = sum_k x[m, k] * Wd[n, k] over the dequantised weights Wd [N, K].
inline int out_col(int n, int layout, int hd, int n_head) {
    if (layout != 1) return n;
    const int h = n / (2 * hd), i = n % (2 * hd);
    return i < hd ? h * hd + i : n_head * hd + h * hd + (i - hd);
}
inline double dot64(const float* a, const float* b, int64_t K) {
    double s = 0.0;
    for (int64_t k = 0; k < K; k++) s += double(a[k]) * double(b[k]);
    return s;
}

// Relative Frobenius error with NaN/unwritten detection and the first mismatches listed.
struct ErrStat {
    double num = 0, den = 0;
    int64_t nonfinite = 0, bad = 0;
    double rel() const { return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0); }
};
inline void err_add(ErrStat& s, double got, double want) {
    if (!std::isfinite(got)) {
        s.nonfinite++;
        s.num += want * want + 1.0;
    } else {
        s.num += (got - want) * (got - want);
    }
    s.den += want * want;
}

}  // namespace ref
