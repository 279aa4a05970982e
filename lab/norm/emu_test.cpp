// The norm kernels of norm.cu on the CPU emulator of lab/gemm/emu (every thread a fiber, warp
// collectives and barriers released in a random order): the forms that the engine treats as one
// another bit for bit, compared bit for bit on random inputs:
//   - norm_rows_w (one warp a (row, group)): its register form (groups of at most 256) and its
//     loop form (`no_regs`, TALLY_NORM=warp-loop) against norm_rows at 128 threads (TALLY_NORM=block),
//     for RMS and L2 norms, with and without the fused gate and the second norm, at group widths
//     the model uses (128, 256) and others (32, 96, 200, 320: the loop form past 256);
//   - every output written (outputs are NaN-poisoned first) and nothing past the view's columns;
//   - add_rms_norm (1,024 threads: decode) and add_rms_norm_256 (prefill): the register form
//     (as built by default, or with -DTALLY_ADD_NORM_PREFILL_EARLY / -DTALLY_ADD_NORM_LATE)
//     against the loop form (`no_regs`, what the unfused launches equal), with the MoE combine
//     (8 and 6 experts), the shared-expert gate, the second add, and partial rows;
//   - the f16 copy of the output (`yh`, TALLY_NORM_CAST=on) by the _h kernels (norm_rows_h,
//     norm_rows_w_h in both forms, add_rms_norm_256_h in its register form and, on alternate
//     cases, its loop form) against the plain kernels: y the same bits, and yh the f16 of every
//     y (round to nearest, as cast_f16_rows) in its [rows][cols] layout, nothing else of it
//     written.
// Build and run (from the repository root; a few seconds):
//   g++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/norm/emu_test.cpp -o /tmp/norm_emu && /tmp/norm_emu
// Exit code 1 if a check fails.
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "norm.cu"

namespace {

std::vector<float> random_vec(std::mt19937_64& g, size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

struct Case {
    int rows, cols, group;
    bool l2, gate, second;
};

// Runs one norm launch over copies of the inputs; returns y (and y2) as written.
struct Out {
    std::vector<float> y, y2;
    std::vector<uint16_t> yh;  // the f16 copy of y ([rows][cols]; 0xffff where unwritten)
};

// f16 bits of x, rounded to nearest (the emulator's conversion, as the kernels' cvt.rn).
uint16_t f16(float x) { return __half_as_ushort(__float2half_rn(x)); }

// Elements of yh ([rows][cols], ld cols) that are not the f16 of y ([rows][ldy]), or written past
// the view (yh has one spare row).
size_t yh_wrong(const std::vector<uint16_t>& yh, const std::vector<float>& y, int rows, int cols, int ldy) {
    size_t n = 0;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < cols; i++) n += yh[size_t(r) * cols + i] != f16(y[size_t(r) * ldy + i]);
    for (size_t i = size_t(rows) * cols; i < yh.size(); i++) n += yh[i] != 0xffff;
    return n;
}

enum class Form { Block, WarpRegs, WarpLoop };

Out run(const Case& c, Form form, const std::vector<float>& x, const std::vector<float>& w,
        const std::vector<float>& z, const std::vector<float>& x2, int ldx, int ldy, bool with_yh) {
    std::vector<float> xd = x, wd = w, zd = z, x2d = x2;
    Out o;
    o.y.assign(size_t(c.rows) * ldy, NAN);
    o.yh.assign(size_t(c.rows + 1) * c.cols, 0xffff);
    o.y2.assign(c.second ? size_t(c.rows) * ldy : 0, NAN);
    NormArgs a{};
    a.x = xd.data();
    a.ldx = ldx;
    a.w = c.l2 ? nullptr : wd.data();
    a.y = o.y.data();
    a.ldy = ldy;
    a.rows = c.rows;
    a.cols = c.cols;
    a.group = c.group;
    a.eps = 1e-6f;
    a.scale = c.l2 ? 0.75f : 1.0f;
    a.l2 = c.l2 ? 1 : 0;
    a.gate = c.gate ? zd.data() : nullptr;
    a.ldgate = ldx;
    const int blocks1 = c.rows * (c.cols / c.group);
    int blocks = blocks1;
    if (c.second) {
        a.x2 = x2d.data();
        a.ldx2 = ldx;
        a.y2 = o.y2.data();
        a.ldy2 = ldy;
        a.rows2 = c.rows;
        a.cols2 = c.cols;
        a.scale2 = c.l2 ? 1.25f : 1.0f;
        a.blocks1 = blocks1;
        blocks += blocks1;
    }
    a.no_regs = form == Form::WarpLoop ? 1 : 0;
    a.yh = with_yh ? o.yh.data() : nullptr;
    a.ldyh = c.cols;
    // With the copy, the _h kernels (the host's choice when it sets yh).
    if (form == Form::Block) {
        emu::launch({unsigned(blocks), 1, 1}, {128, 1, 1}, [&] {
            if (with_yh) norm_rows_h(a);
            else norm_rows(a);
        });
    } else {
        const unsigned grid = unsigned((blocks + NORM_W_GROUPS - 1) / NORM_W_GROUPS);
        emu::launch({grid, 1, 1}, {32 * NORM_W_GROUPS, 1, 1}, [&] {
            if (with_yh) norm_rows_w_h(a);
            else norm_rows_w(a);
        });
    }
    return o;
}

// Number of floats that differ in bits between a and b (NaN-poisoned padding included).
size_t differ(const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += bits(a[i]) != bits(b[i]);
    return n;
}

struct AddCase {
    int threads, rows, cols, ek;
    bool gate, c, mid, skip_a;
};

// One add_rms_norm launch (the register form unless loop) over copies of the inputs: every
// buffer it may write, as written.
struct AddOut {
    std::vector<float> a, mid, sum, y, gb;
    std::vector<uint16_t> yh;
};

AddOut run_add(const AddCase& t, bool loop, const std::vector<float>& a0, const std::vector<float>& b,
               const std::vector<float>& c, const std::vector<float>& w, const std::vector<float>& gx,
               const std::vector<float>& gw, const std::vector<float>& ey, const std::vector<float>& ew, int ld,
               bool with_yh) {
    AddOut o;
    o.yh.assign(size_t(t.rows + 1) * t.cols, 0xffff);
    o.a = a0;  // the combine's output a (written unless skipped), or an input
    std::vector<float> bd = b, cd = c, wd = w, gxd = gx, gwd = gw, eyd = ey, ewd = ew;
    o.mid.assign(size_t(t.rows) * ld, NAN);
    o.sum.assign(size_t(t.rows) * ld, NAN);
    o.y.assign(size_t(t.rows) * ld, NAN);
    o.gb.assign(size_t(t.rows) * ld, NAN);
    AddNormArgs p{};
    p.a = o.a.data();
    p.lda = ld;
    p.b = bd.data();
    p.ldb = ld;
    p.c = t.c ? cd.data() : nullptr;
    p.ldc = ld;
    p.mid = t.c && t.mid ? o.mid.data() : nullptr;
    p.ldm = ld;
    p.sum = o.sum.data();
    p.lds = ld;
    p.w = wd.data();
    p.y = o.y.data();
    p.ldy = ld;
    p.rows = t.rows;
    p.cols = t.cols;
    p.eps = 1e-6f;
    p.skip_a = t.skip_a ? 1 : 0;
    p.gx = t.gate ? gxd.data() : nullptr;
    p.ldgx = ld;
    p.gw = gwd.data();
    p.gb = t.gate && t.mid ? o.gb.data() : nullptr;
    p.ldgb = ld;
    p.ey = t.ek ? eyd.data() : nullptr;
    p.ldey = ld;
    p.ew = ewd.data();
    p.ldew = 8;
    p.ek = t.ek;
    p.no_regs = loop ? 1 : 0;
    p.yh = with_yh ? o.yh.data() : nullptr;
    p.ldyh = t.cols;
    // The copy: add_rms_norm_256_h (prefill; the decode kernel has no copy).
    if (t.threads == 1024)
        emu::launch({unsigned(t.rows), 1, 1}, {1024, 1, 1}, [&] { add_rms_norm(p); });
    else
        emu::launch({unsigned(t.rows), 1, 1}, {256, 1, 1}, [&] {
            if (with_yh) add_rms_norm_256_h(p);
            else add_rms_norm_256(p);
        });
    return o;
}

int add_norm_cases(std::mt19937_64& g) {
    const AddCase cases[] = {
        {1024, 3, 2048, 8, true, true, false, true},  // decode: combine, gate, two adds, skips
        {1024, 3, 2048, 0, false, false, false, false},  // decode: attention output add + norm
        {256, 5, 2048, 8, true, true, false, true},   // prefill: the same
        {256, 5, 2048, 0, false, false, false, false},
        {256, 4, 2048, 6, true, true, true, false},   // 6 experts, every output stored
        {256, 4, 1000, 8, false, true, true, false},  // a partial last element round
        {1024, 2, 3000, 5, true, false, false, false},
    };
    int fails = 0, n = 0;
    for (const AddCase& t : cases) {
        const bool loop_yh = n++ % 2 == 1;  // alternate cases: the loop form stores yh as well
        const int ld = t.cols + 4;
        const size_t n = size_t(t.rows) * ld;
        const auto a0 = random_vec(g, n, -2.0f, 2.0f), b = random_vec(g, n, -2.0f, 2.0f);
        const auto c = random_vec(g, n, -4.0f, 4.0f), w = random_vec(g, t.cols, 0.5f, 1.5f);
        const auto gx = random_vec(g, n, -1.0f, 1.0f), gw = random_vec(g, t.cols, -0.05f, 0.05f);
        const auto ey = random_vec(g, size_t(t.rows) * 8 * ld, -3.0f, 3.0f);
        const auto ew = random_vec(g, size_t(t.rows) * 8, 0.0f, 0.3f);
        emu::st().order_rng.seed(3u);
        const AddOut ref = run_add(t, true, a0, b, c, w, gx, gw, ey, ew, ld, false);
        emu::st().order_rng.seed(5u);
        const bool yh = t.threads == 256;
        const AddOut got = run_add(t, false, a0, b, c, w, gx, gw, ey, ew, ld, yh);
        emu::st().order_rng.seed(9u);
        const AddOut loop = run_add(t, true, a0, b, c, w, gx, gw, ey, ew, ld, yh && loop_yh);
        // The loop form stores a whatever skip_a says; the register form leaves it when skipped.
        const size_t d = differ(ref.sum, got.sum) + differ(ref.y, got.y) + differ(ref.mid, got.mid) +
                         differ(ref.gb, got.gb) + (t.ek && t.skip_a ? 0 : differ(ref.a, got.a));
        size_t unwritten = 0;
        for (int r = 0; r < t.rows; r++)
            for (int i = 0; i < t.cols; i++)
                unwritten += !std::isfinite(got.sum[size_t(r) * ld + i]) + !std::isfinite(got.y[size_t(r) * ld + i]);
        const size_t dl = differ(ref.y, loop.y) + differ(ref.sum, loop.sum);
        const size_t yh_bad = (yh ? yh_wrong(got.yh, ref.y, t.rows, t.cols, ld) : 0) +
                              (yh && loop_yh ? yh_wrong(loop.yh, ref.y, t.rows, t.cols, ld) : 0);
        const bool ok = d == 0 && unwritten == 0 && dl == 0 && yh_bad == 0;
        fails += !ok;
        std::printf("%s add_rms_norm%s rows %d cols %d experts %d%s%s%s%s: register form against the loop form: %zu floats differ, %zu unwritten; with the f16 copy%s: y %zu differ, %zu f16 values wrong\n",
                    ok ? "ok  " : "FAIL", t.threads == 256 ? "_256" : "", t.rows, t.cols, t.ek, t.gate ? " +gate" : "",
                    t.c ? " +second add" : "", t.mid ? " +mid" : "", t.skip_a ? " skip_a" : "", d, unwritten,
                    !yh ? " (none: the decode kernel)" : loop_yh ? " (both forms)" : "", dl, yh_bad);
    }
    return fails;
}

}  // namespace

int main() {
    std::mt19937_64 g(20261206);
    const Case cases[] = {
        {9, 4 * 128, 128, false, true, false},   // the gated output norm (RMS, silu gate)
        {9, 4 * 128, 128, true, false, true},    // q and k L2 norms in one launch
        {5, 3 * 256, 256, false, false, false},  // attention's q norm (RMS, group 256)
        {5, 2 * 256, 256, false, false, true},   // q and k norms (RMS) in one launch
        {7, 4 * 32, 32, true, false, false},
        {7, 3 * 96, 96, false, true, false},
        {6, 2 * 200, 200, true, true, false},
        {4, 2 * 320, 320, false, true, false},   // past 256: the loop form in both
    };
    int fails = 0;
    for (const Case& c : cases) {
        const int ldx = c.cols + 8, ldy = c.cols + 4;
        const auto x = random_vec(g, size_t(c.rows) * ldx, -3.0f, 3.0f);
        const auto w = random_vec(g, c.group, 0.5f, 1.5f);
        const auto z = random_vec(g, size_t(c.rows) * ldx, -4.0f, 4.0f);
        const auto x2 = random_vec(g, size_t(c.rows) * ldx, -2.0f, 2.0f);
        emu::st().order_rng.seed(1u);
        const Out ref = run(c, Form::Block, x, w, z, x2, ldx, ldy, false);
        emu::st().order_rng.seed(7u);
        const Out regs = run(c, Form::WarpRegs, x, w, z, x2, ldx, ldy, true);
        emu::st().order_rng.seed(11u);
        const Out loop = run(c, Form::WarpLoop, x, w, z, x2, ldx, ldy, true);
        emu::st().order_rng.seed(13u);
        const Out block = run(c, Form::Block, x, w, z, x2, ldx, ldy, true);
        // Every output of the view written by the reference, the padding left alone.
        size_t unwritten = 0, padding = 0;
        for (const auto* y : {&ref.y, &ref.y2})
            for (size_t i = 0; i < y->size(); i++) {
                const bool inside = int(i % ldy) < c.cols;
                if (inside && !std::isfinite((*y)[i])) unwritten++;
                if (!inside && !std::isnan((*y)[i])) padding++;
            }
        const size_t d_regs = differ(ref.y, regs.y) + differ(ref.y2, regs.y2);
        const size_t d_loop = differ(ref.y, loop.y) + differ(ref.y2, loop.y2);
        const size_t d_block = differ(ref.y, block.y) + differ(ref.y2, block.y2);
        const size_t yh_bad = yh_wrong(regs.yh, ref.y, c.rows, c.cols, ldy) + yh_wrong(loop.yh, ref.y, c.rows, c.cols, ldy) +
                              yh_wrong(block.yh, ref.y, c.rows, c.cols, ldy);
        const bool ok = unwritten == 0 && padding == 0 && d_regs == 0 && d_loop == 0 && d_block == 0 && yh_bad == 0;
        fails += !ok;
        std::printf("%s rows %d cols %d group %3d %s%s%s: norm_rows_w regs / loop against norm_rows (128 threads): %zu / %zu floats differ; unwritten %zu, padding written %zu; with the f16 copy: %zu f16 values wrong\n",
                    ok ? "ok  " : "FAIL", c.rows, c.cols, c.group, c.l2 ? "l2" : "rms", c.gate ? " +gate" : "",
                    c.second ? " +second norm" : "", d_regs, d_loop, unwritten, padding, yh_bad);
    }
    const int add_fails = add_norm_cases(g);
    std::printf("%s: %d of %zu norm cases and %d add + norm cases failed\n", fails + add_fails ? "FAIL" : "ok", fails,
                sizeof(cases) / sizeof(cases[0]), add_fails);
    return fails + add_fails ? 1 : 0;
}
