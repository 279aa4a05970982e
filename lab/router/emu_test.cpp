// router_fused (router.cu: the decode router's f32 GEMV and router_topk8's softmax and top-k in
// one launch, the last block running the top-k) on the CPU emulator of lab/gemm/emu, blocks in
// order, barriers released in a random order. Per case, with fresh random weights and x and
// NaN / -1 poisoned outputs:
//   - the logits against a float64 reference: relative error per logit < 1e-5 of sum |w x|;
//   - the ids and weights bit for bit router_topk8's on the logits the kernel stored (the
//     kernel the engine ran after gemv_f32 before);
//   - the logits alone (k = 0, an unfused run's router node) the same bits;
//   - the counter back at 0, and a second launch on it (new x) right again;
//   - a run under another scheduler seed: the same bits;
//   - M token rows in one launch (grid.y): each row a one-row launch's bits.
// Build and run (from the repository root; ~5 s):
//   c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/router/emu_test.cpp -o /tmp/router_emu && /tmp/router_emu
// Exit code 1 if a check fails (3: the emulator found a deadlock; 4: a bad primitive use).
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <cstring>
#include <vector>

#include "router.cu"
#include "../../gemm/emu/emu_mem.h"

namespace {

struct Case {
    int E, K, k;
    long long ldw;  // floats; >= K, a multiple of 4
};

struct Out {
    std::vector<float> logits, wts;
    std::vector<int> ids;
    unsigned counter;
};

Out launch_fused(EmuMem& b, const float* x, const float* w, const Case& c, unsigned* counter) {
    float* logits = b.alloc<float>(c.E);
    int* ids = b.alloc<int>(c.k);
    float* wts = b.alloc<float>(c.k);
    b.poison(logits, c.E);
    b.poison(wts, c.k);
    for (int i = 0; i < c.k; i++) ids[i] = -1;
    RouterArgs a{x, w, c.ldw, logits, ids, wts, counter, c.E, c.K, c.k, 0};
    emu::launch({unsigned((c.E + ROUTER_ROWS - 1) / ROUTER_ROWS), 1, 1}, {ROUTER_THREADS, 1, 1}, [&] { router_fused(a); });
    return {b.download(logits, c.E), b.download(wts, c.k), b.download(ids, c.k), *counter};
}

// router_topk8 on `logits` (one row).
void topk8(EmuMem& b, const std::vector<float>& logits, int k, std::vector<int>& ids, std::vector<float>& wts) {
    float* l = b.upload(logits);
    int* id = b.alloc<int>(k);
    float* wt = b.alloc<float>(k);
    TopkArgs a{l, 0, id, 0, wt, 0, 1, int(logits.size()), k};
    emu::launch({1, 1, 1}, {256, 1, 1}, [&] { router_topk8(a); });
    ids = b.download(id, k);
    wts = b.download(wt, k);
}

// The worst logit error against float64, relative to sum |w x| of its row (1e30 for a
// non-finite logit).
double worst_error(const std::vector<float>& w, const std::vector<float>& x, const float* logits, const Case& c) {
    double worst = 0;
    for (int e = 0; e < c.E; e++) {
        double want = 0, mag = 0;
        for (int i = 0; i < c.K; i++) {
            want += double(w[size_t(e) * c.ldw + i]) * x[i];
            mag += std::fabs(double(w[size_t(e) * c.ldw + i]) * x[i]);
        }
        worst = std::max(worst, std::isfinite(logits[e]) ? std::fabs(logits[e] - want) / mag : 1e30);
    }
    return worst;
}

int run_case(const Case& c, uint64_t seed) {
    ref::Rng r(seed);
    EmuMem b;
    std::vector<float> w(size_t(c.E) * c.ldw), x1(c.K), x2(c.K);
    for (auto& v : w) v = float(r.normal() * 0.05);
    for (auto& v : x1) v = float(r.normal());
    for (auto& v : x2) v = float(r.normal());
    const float* dw = b.upload(w);
    unsigned* counter = b.alloc<unsigned>(1);
    *counter = 0;
    int fails = 0;
    if (c.E > 256) {  // the logits alone; a top-k launch of this many rows writes nothing
        const float* dx = b.upload(x1);
        float* lg0 = b.alloc<float>(c.E);
        b.poison(lg0, c.E);
        RouterArgs a0{dx, dw, c.ldw, lg0, nullptr, nullptr, nullptr, c.E, c.K, 0, 0};
        emu::launch({unsigned((c.E + ROUTER_ROWS - 1) / ROUTER_ROWS), 1, 1}, {ROUTER_THREADS, 1, 1}, [&] { router_fused(a0); });
        const double worst = worst_error(w, x1, lg0, c);
        const Out o = launch_fused(b, dx, dw, c, counter);
        bool untouched = *counter == 0;
        for (int e = 0; e < c.E; e++) untouched = untouched && std::isnan(o.logits[e]);
        for (int i = 0; i < c.k; i++) untouched = untouched && o.ids[i] == -1;
        const bool ok = worst < 1e-5 && untouched;
        std::printf("%s E %3d K %4d: logits alone, error %.2e; with a top-k %s\n", ok ? "ok    " : "FAILED", c.E, c.K,
                    worst, untouched ? "nothing written" : "WROTE");
        b.release();
        return (!ok) * 2;
    }
    for (int pass = 0; pass < 2; pass++) {
        const std::vector<float>& xv = pass == 0 ? x1 : x2;  // the second on the counter the first left
        const float* dx = b.upload(xv);
        emu::st().order_rng.seed(1u + unsigned(pass));
        const Out o = launch_fused(b, dx, dw, c, counter);
        emu::st().order_rng.seed(0x9E3779B9u + unsigned(seed));
        const Out o2 = launch_fused(b, dx, dw, c, counter);
        const double worst = worst_error(w, xv, o.logits.data(), c);
        // The logits alone (k = 0: the router node of an unfused run): the same bits, and
        // nothing else written.
        float* lg0 = b.alloc<float>(c.E);
        b.poison(lg0, c.E);
        RouterArgs a0{dx, dw, c.ldw, lg0, nullptr, nullptr, nullptr, c.E, c.K, 0, 0};
        emu::launch({unsigned((c.E + ROUTER_ROWS - 1) / ROUTER_ROWS), 1, 1}, {ROUTER_THREADS, 1, 1}, [&] { router_fused(a0); });
        bool same_alone = true;
        for (int e = 0; e < c.E; e++) same_alone = same_alone && ref::f32_bits(lg0[e]) == ref::f32_bits(o.logits[e]);
        std::vector<int> ids;
        std::vector<float> wts;
        topk8(b, o.logits, c.k, ids, wts);
        bool same_topk = ids == o.ids;
        for (int i = 0; i < c.k; i++) same_topk = same_topk && ref::f32_bits(wts[i]) == ref::f32_bits(o.wts[i]);
        bool same_runs = o.ids == o2.ids && o.counter == o2.counter;
        for (int e = 0; e < c.E; e++) same_runs = same_runs && ref::f32_bits(o.logits[e]) == ref::f32_bits(o2.logits[e]);
        for (int i = 0; i < c.k; i++) same_runs = same_runs && ref::f32_bits(o.wts[i]) == ref::f32_bits(o2.wts[i]);
        const bool ok = worst < 1e-5 && same_topk && same_runs && same_alone && o.counter == 0 && o2.counter == 0;
        std::printf("%s E %3d K %4d k %2d ldw %4lld pass %d: logit error %.2e, top-k %s router_topk8's, "
                    "counter %u, other warp order %s, logits alone %s\n",
                    ok ? "ok    " : "FAILED", c.E, c.K, c.k, c.ldw, pass, worst, same_topk ? "=" : "!=", o.counter,
                    same_runs ? "same bits" : "DIFFERS", same_alone ? "same bits" : "DIFFER");
        fails += !ok;
    }
    b.release();
    return fails;
}

// M token rows in one launch (grid.y = M: a verification batch), x, logits and the top-k rows
// padded: each row's logits, ids and weights bit for bit a one-row launch's on that row, the
// padding untouched, every counter back at 0.
int run_rows_case(const Case& c, int M, uint64_t seed) {
    ref::Rng r(seed);
    EmuMem b;
    const long long ldx = c.K + 4, ldl = c.E + 3;
    const int ldt = c.k + 1;
    std::vector<float> w(size_t(c.E) * c.ldw), x(size_t(M) * ldx);
    for (auto& v : w) v = float(r.normal() * 0.05);
    for (auto& v : x) v = float(r.normal());
    const float* dw = b.upload(w);
    const float* dx = b.upload(x);
    unsigned* counter = b.alloc<unsigned>(M);
    for (int m = 0; m < M; m++) counter[m] = 0;
    float* logits = b.alloc<float>(size_t(M) * ldl);
    int* ids = b.alloc<int>(size_t(M) * ldt);
    float* wts = b.alloc<float>(size_t(M) * ldt);
    b.poison(logits, size_t(M) * ldl);
    b.poison(wts, size_t(M) * ldt);
    for (int i = 0; i < M * ldt; i++) ids[i] = -1;
    RouterArgs a{dx, dw, c.ldw, logits, ids, wts, counter, c.E, c.K, c.k, ldt, ldx, ldl};
    emu::launch({unsigned((c.E + ROUTER_ROWS - 1) / ROUTER_ROWS), unsigned(M), 1}, {ROUTER_THREADS, 1, 1},
                [&] { router_fused_rows(a); });
    long long differ = 0, pad = 0, counters = 0;
    unsigned* one_counter = b.alloc<unsigned>(1);
    *one_counter = 0;
    for (int m = 0; m < M; m++) {
        const Out o = launch_fused(b, dx + size_t(m) * ldx, dw, c, one_counter);
        for (int e = 0; e < c.E; e++) differ += ref::f32_bits(o.logits[e]) != ref::f32_bits(logits[size_t(m) * ldl + e]);
        for (int i = 0; i < c.k; i++) {
            differ += o.ids[i] != ids[size_t(m) * ldt + i];
            differ += ref::f32_bits(o.wts[i]) != ref::f32_bits(wts[size_t(m) * ldt + i]);
        }
        for (long long e = c.E; e < ldl; e++) pad += !std::isnan(logits[size_t(m) * ldl + e]);
        pad += ids[size_t(m) * ldt + c.k] != -1 || !std::isnan(wts[size_t(m) * ldt + c.k]);
        counters += counter[m] != 0;
    }
    const bool ok = differ == 0 && pad == 0 && counters == 0;
    std::printf("%s E %3d K %4d k %2d, %d token rows: %lld values differ from one-row launches, %lld padding "
                "values written, %lld counters not back at 0\n",
                ok ? "ok    " : "FAILED", c.E, c.K, c.k, M, differ, pad, counters);
    b.release();
    return !ok;
}

}  // namespace

int main() {
    const Case cases[] = {
        {256, 2048, 8, 2048},  // the model's router
        {256, 1024, 8, 1024}, {256, 4096, 8, 4096}, {128, 2048, 8, 2048}, {200, 512, 6, 516},
        {254, 2052, 16, 2056},  // a tail of pieces, experts not a multiple of the block's rows
        {64, 8192, 8, 8192},  {32, 5000, 4, 5004},  // more than one round of four pieces a thread
        {8, 64, 2, 64},         {1, 4, 1, 4},
        {300, 256, 8, 256},  // more rows than the top-k takes: run with k = 0 only (below)
    };
    int fails = 0, n = 0;
    for (const Case& c : cases) {
        fails += run_case(c, 20261207u + unsigned(n));
        n += 2;
    }
    fails += run_rows_case({256, 2048, 8, 2048}, 4, 77);  // a k = 3 verification batch
    fails += run_rows_case({200, 512, 6, 516}, 16, 78);   // STEP_MAX_T rows, a ragged shape
    n += 2;
    std::printf("%s: %d of %d checks failed\n", fails ? "FAILED" : "PASSED", fails, n);
    return fails ? 1 : 0;
}
