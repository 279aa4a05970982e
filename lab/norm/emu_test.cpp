// The norm kernels of norm.cu on the CPU emulator of lab/gemm/emu (every thread a fiber, warp
// collectives and barriers released in a random order): the forms that the engine treats as one
// another bit for bit, compared bit for bit on random inputs:
//   - norm_rows_w (one warp a (row, group)): its register form (groups of at most 256) and its
//     loop form (`no_regs`, TALLY_NORM=warp-loop) against norm_rows at 128 threads (TALLY_NORM=block),
//     for RMS and L2 norms, with and without the fused gate and the second norm, at group widths
//     the model uses (128, 256) and others (32, 96, 200, 320: the loop form past 256);
//   - every output written (outputs are NaN-poisoned first) and nothing past the view's columns.
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
};

enum class Form { Block, WarpRegs, WarpLoop };

Out run(const Case& c, Form form, const std::vector<float>& x, const std::vector<float>& w,
        const std::vector<float>& z, const std::vector<float>& x2, int ldx, int ldy) {
    std::vector<float> xd = x, wd = w, zd = z, x2d = x2;
    Out o;
    o.y.assign(size_t(c.rows) * ldy, NAN);
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
    if (form == Form::Block) {
        emu::launch({unsigned(blocks), 1, 1}, {128, 1, 1}, [&] { norm_rows(a); });
    } else {
        const unsigned grid = unsigned((blocks + NORM_W_GROUPS - 1) / NORM_W_GROUPS);
        emu::launch({grid, 1, 1}, {32 * NORM_W_GROUPS, 1, 1}, [&] { norm_rows_w(a); });
    }
    return o;
}

// Number of floats that differ in bits between a and b (NaN-poisoned padding included).
size_t differ(const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += bits(a[i]) != bits(b[i]);
    return n;
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
        const Out ref = run(c, Form::Block, x, w, z, x2, ldx, ldy);
        emu::st().order_rng.seed(7u);
        const Out regs = run(c, Form::WarpRegs, x, w, z, x2, ldx, ldy);
        emu::st().order_rng.seed(11u);
        const Out loop = run(c, Form::WarpLoop, x, w, z, x2, ldx, ldy);
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
        const bool ok = unwritten == 0 && padding == 0 && d_regs == 0 && d_loop == 0;
        fails += !ok;
        std::printf("%s rows %d cols %d group %3d %s%s%s: norm_rows_w regs / loop against norm_rows (128 threads): %zu / %zu floats differ; unwritten %zu, padding written %zu\n",
                    ok ? "ok  " : "FAIL", c.rows, c.cols, c.group, c.l2 ? "l2" : "rms", c.gate ? " +gate" : "",
                    c.second ? " +second norm" : "", d_regs, d_loop, unwritten, padding);
    }
    std::printf("%s: %d of %zu norm cases failed\n", fails ? "FAIL" : "ok", fails, sizeof(cases) / sizeof(cases[0]));
    return fails ? 1 : 0;
}
