// Runs the GEMM lab's correctness checks on the CPU emulator (no GPU needed): the device code of
// quant.cuh, gemm.cu and moe.cu compiled as C++ with emu/cuda_fp16.h standing in for CUDA.
// Build and run (from the repository root):
//   g++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
//       lab/gemm/emu/emu_test.cpp -o /tmp/gemm_emu && /tmp/gemm_emu [quick|pieces|new|newquick|gemv|paired|multirow|gated|ws|swap|wg]  (paired: also gemv_multi, non-finite x and the routed + shared side-by-side launches)
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include <memory>

#include "gemm.cu"
#include "moe.cu"
#include "../cases.h"
#include "emu_backend.h"

// The piece probe by direct calls of the device functions.
template <int T>
static int test_pieces(ref::Rng& rng) {
    const int K = 512, rows = 3, P = K / 32;
    const std::vector<uint8_t> w = ref::random_weights(T, rows, K, rng);
    const int64_t rb = ref::row_bytes(T, K);
    EmuBackend b;
    const uint8_t* dw = b.upload(w);
    PieceProbe g;
    int il_bad = 0;
    g.dq8.resize(size_t(rows) * K);
    g.h16.resize(size_t(rows) * K);
    g.parts.resize(size_t(rows) * P * 36);
    for (int r = 0; r < rows; r++) {
        const uint8_t* row = dw + r * rb;
        for (int k = 0; k < K; k += 8) dequant8<T>(row, k, g.dq8.data() + size_t(r) * K + k);
        for (int p = 0; p < P; p++) {
            Piece<T> pc;
            pc.issue(row, p);
            uint4 o[4];
            pc.to_f16(p, o);
            const unsigned words[16] = {o[0].x, o[0].y, o[0].z, o[0].w, o[1].x, o[1].y, o[1].z, o[1].w,
                                        o[2].x, o[2].y, o[2].z, o[2].w, o[3].x, o[3].y, o[3].z, o[3].w};
            for (int i = 0; i < 32; i++)
                g.h16[size_t(r) * K + host_seg(T, p, i / 16) + i % 16] = uint16_t(words[i / 2] >> (16 * (i % 2)));
            float* q = g.parts.data() + (size_t(r) * P + p) * 36;
            piece_parts<T>(pc, p, q, q + 32, q + 34);
            if constexpr (gemv_il<T>()) {
                // The integer GEMV's interleaved bytes: byte t is element t / 2 + 16 (t & 1),
                // value + ZO_IL, against to_bytes (element order, value + ZO); same scales.
                unsigned nat[8], il[8];
                float sn[2], on[2], si[2], oi[2];
                pc.to_bytes(p, nat, sn, on);
                pc.to_bytes_il(p, il, si, oi);
                for (int t = 0; t < 32; t++) {
                    const int e = t / 2 + 16 * (t & 1);
                    const int vi = int((il[t / 4] >> (8 * (t % 4))) & 0xffu) - Piece<T>::ZO_IL;
                    const int vn = int((nat[e / 4] >> (8 * (e % 4))) & 0xffu) - Piece<T>::ZO;
                    il_bad += vi != vn;
                }
                il_bad += sn[0] != si[0] || sn[1] != si[1] || on[0] != oi[0] || on[1] != oi[1];
            }
        }
    }
    if (il_bad) std::printf("FAIL pieces %d: to_bytes_il differs from to_bytes in %d places\n", T, il_bad);
    const bool pass = check_pieces(T, w, K, rows, g) && il_bad == 0;
    b.release();
    return pass ? 0 : 1;
}

// dequant_f16 (both layouts) and cast_f16_rows: every element equals the host reference's f32
// value rounded to nearest f16, at the permuted row for layout 1; poisoned words elsewhere stay.
static int test_f16_operands(int type, int layout, ref::Rng& rng) {
    const int K = 512, hd = 8, n_head = 2, N = 2 * n_head * hd;
    const std::vector<uint8_t> w = ref::random_weights(type, N, K, rng);
    EmuBackend b;
    DequantF16Args a{};
    a.w = b.upload(w);
    a.row_bytes = ref::row_bytes(type, K);
    a.type = type;
    a.K = K;
    a.N = N;
    a.layout = layout;
    a.head_dim = hd;
    a.n_head = n_head;
    const size_t words = size_t(N) * K / 2 + 4;
    u32* out = b.alloc<u32>(words);
    for (size_t i = 0; i < words; i++) out[i] = 0x7E007E00u;
    a.out = out;
    emu::launch({unsigned((K + 2047) / 2048), unsigned(N), 1}, {256, 1, 1}, [&] { dequant_f16(a); });
    std::vector<float> want(static_cast<size_t>(K));
    int64_t mism = 0;
    for (int n = 0; n < N; n++) {
        ref::dequant_row(type, w.data() + n * a.row_bytes, K, want.data());
        int col = n;
        if (layout == 1) {
            const int h = n / (2 * hd), i = n % (2 * hd);
            col = i < hd ? h * hd + i : n_head * hd + h * hd + (i - hd);
        }
        for (int k = 0; k < K; k++) {
            const uint16_t got = uint16_t(out[size_t(col) * K / 2 + k / 2] >> (16 * (k % 2)));
            mism += got != ref::hf32_to_f16(want[size_t(k)]);
        }
    }
    for (size_t i = size_t(N) * K / 2; i < words; i++) mism += out[i] != 0x7E007E00u;
    // The activations: random f32 rows with a row stride larger than K.
    const int M = 5, ldx = K + 4;
    std::vector<float> x(size_t(M) * ldx);
    for (float& v : x) v = float(rng.normal() * 3.0);
    CastF16Args c{};
    c.x = b.upload(x);
    c.ldx = ldx;
    c.M = M;
    c.K = K;
    u32* xo = b.alloc<u32>(size_t(M) * K / 2);
    c.out = xo;
    emu::launch({unsigned((K + 2047) / 2048), unsigned(M), 1}, {256, 1, 1}, [&] { cast_f16_rows(c); });
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            mism += uint16_t(xo[size_t(m) * K / 2 + k / 2] >> (16 * (k % 2))) != ref::hf32_to_f16(x[size_t(m) * ldx + k]);
    b.release();
    std::printf("  %s dequant_f16 %-5s layout %d + cast_f16_rows: %lld mismatches (bit-exact)\n", mism ? "FAIL" : "ok  ",
                ref::type_name(type), layout, static_cast<long long>(mism));
    return mism ? 1 : 0;
}

// The GemmArgs of a one-row GEMV case: N rows of random `type` weights (E experts of them for
// a MoE case, one-row tiles from `ids`, x row t / topk), x = dx of K columns, `rows` x rows or
// tiles. Outputs are the caller's.
static GemmArgs gemv_case_args(EmuBackend& b, int type, bool moe, int rows, int N, int K, int E, int topk,
                               const float* dx, const int32_t* ids, ref::Rng& rng) {
    const int64_t rb = ref::row_bytes(type, K);
    GemmArgs a{};
    a.w = b.upload(ref::random_weights(type, int64_t(moe ? E : 1) * N, K, rng));
    a.w_row_bytes = rb;
    a.w_expert_bytes = moe ? rb * N : 0;
    a.x = dx;
    a.ldx = K;
    a.M = rows;
    a.N = N;
    a.K = K;
    a.x_div = moe ? topk : 1;
    if (moe) {
        a.n_expert = E;
        a.tile_expert = ids;
    }
    return a;
}

// gemv_<t> in paired mode (GemmArgs::w2) against two unpaired launches: gate and up bit-equal,
// the third output bit-equal to silu(gate) * up (the binary map's SwiGlu), dense and over
// one-row MoE tiles taken from the ids; poisoned outputs, so a column left unwritten shows.
static int test_paired(int type, bool moe, ref::Rng& rng) {
    const int K = 2048, N = moe ? 72 : 100, E = moe ? 8 : 1, topk = moe ? 4 : 1, T = moe ? 1 : 2;
    const int M = moe ? T * topk : T;
    std::vector<float> x(size_t(T) * K);
    for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
    const std::vector<int32_t> ids = moe ? ref::route_random(T, topk, E, rng) : std::vector<int32_t>{};
    EmuBackend b;
    // The gate weights (a.w) and the up weights, both random.
    const GemmArgs a = gemv_case_args(b, type, moe, M, N, K, E, topk, b.upload(x), moe ? b.upload(ids) : nullptr, rng);
    const uint8_t* w_up = b.upload(ref::random_weights(type, int64_t(E) * N, K, rng));
    const size_t ny = size_t(M) * N;
    auto run = [&](GemmArgs g, int threads, int cols_per_warp) {
        const int cols = (threads / 32) * cols_per_warp;
        b.gemm(gemm_fn(type, V_GEMV), unsigned((N + cols - 1) / cols), unsigned(M), threads, 0, g);
    };
    float* yg = b.alloc<float>(ny);
    float* yu = b.alloc<float>(ny);
    b.poison(yg, ny);
    b.poison(yu, ny);
    GemmArgs g = a;
    g.y = yg;
    g.ldy = N;
    run(g, 256, 2);
    GemmArgs u = g;
    u.w = w_up;
    u.y = yu;
    run(u, 128, 2);
    float* p1 = b.alloc<float>(ny);
    float* p2 = b.alloc<float>(ny);
    float* p3 = b.alloc<float>(ny);
    b.poison(p1, ny);
    b.poison(p2, ny);
    b.poison(p3, ny);
    GemmArgs pr = g;
    pr.y = p1;
    pr.w2 = u.w;
    pr.y2 = p2;
    pr.ldy2 = N;
    pr.y3 = p3;
    pr.ldy3 = N;
    run(pr, 64, 1);
    // Without the third output (two projections, no SwiGlu after them).
    float* q1 = b.alloc<float>(ny);
    float* q2 = b.alloc<float>(ny);
    b.poison(q1, ny);
    b.poison(q2, ny);
    GemmArgs pq = pr;
    pq.y = q1;
    pq.y2 = q2;
    pq.y3 = nullptr;
    pq.ldy3 = 0;
    run(pq, 128, 1);
    long long bad = 0;
    for (size_t i = 0; i < ny; i++) {
        const float want3 = tally_silu(yg[i]) * yu[i];
        bad += std::memcmp(&p1[i], &yg[i], 4) != 0 || std::memcmp(&p2[i], &yu[i], 4) != 0 ||
               std::memcmp(&p3[i], &want3, 4) != 0 || yg[i] != yg[i] || std::memcmp(&q1[i], &yg[i], 4) != 0 ||
               std::memcmp(&q2[i], &yu[i], 4) != 0;
    }
    std::printf("  %s paired gate/up %-5s %-5s M=%d N=%d K=%d: %lld of %zu outputs differ\n", bad ? "FAIL" : "ok  ",
                ref::type_name(type), moe ? "moe" : "dense", M, N, K, bad, ny);
    b.release();
    return bad ? 1 : 0;
}

// Non-finite and tiny x through gemv_<t>: the integer body rounds x to int16 per 16 elements,
// and a rounding that let a NaN or an infinity become a finite integer would hide it from the
// engine's finite guard. Row 0 of x holds a NaN (element 37), row 1 an infinity (element
// 1500), row 2 is finite: every output of rows 0 and 1 must be NaN or infinite, every output of
// row 2 finite and within the GEMV bound of the float64 reference. Row 3 is row 2 times 1e-36
// (below the integer body's normal scale range, 32767 * 2^-126): finite, and within 2e-2 (its
// step is 2^-126, about 1% of its values). Poisoned outputs first.
static int test_nonfinite_x(int type, ref::Rng& rng) {
    const int K = 2048, N = 40, M = 4;
    const int64_t rb = ref::row_bytes(type, K);
    const std::vector<uint8_t> w = ref::random_weights(type, N, K, rng);
    std::vector<float> x(size_t(M) * K);
    for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
    for (int k = 0; k < K; k++) x[size_t(3 * K + k)] = x[size_t(2 * K + k)] * 1e-36f;
    x[37] = std::nanf("");
    x[size_t(K) + 1500] = INFINITY;
    EmuBackend b;
    GemmArgs a{};
    a.w = b.upload(w);
    a.w_row_bytes = rb;
    a.x = b.upload(x);
    a.ldx = K;
    a.M = M;
    a.N = N;
    a.K = K;
    float* y = b.alloc<float>(size_t(M) * N);
    b.poison(y, size_t(M) * N);
    a.y = y;
    a.ldy = N;
    b.gemm(gemm_fn(type, V_GEMV), unsigned((N + 15) / 16), unsigned(M), 256, 0, a);
    std::vector<float> wf(static_cast<size_t>(K));
    long long bad = 0;
    double num = 0, den = 0, num3 = 0, den3 = 0;
    for (int n = 0; n < N; n++) {
        ref::dequant_row(type, w.data() + n * rb, K, wf.data());
        double want = 0, want3 = 0;
        for (int k = 0; k < K; k++) {
            want += double(wf[size_t(k)]) * x[size_t(2 * K + k)];
            want3 += double(wf[size_t(k)]) * x[size_t(3 * K + k)];
        }
        bad += std::isfinite(y[n]) || std::isfinite(y[N + n]) || !std::isfinite(y[2 * N + n]) ||
               !std::isfinite(y[3 * N + n]);
        num += (y[2 * N + n] - want) * (y[2 * N + n] - want);
        den += want * want;
        num3 += (y[3 * N + n] - want3) * (y[3 * N + n] - want3);
        den3 += want3 * want3;
    }
    const double rel = std::sqrt(num / den), rel3 = std::sqrt(num3 / den3);
    const bool fail = bad != 0 || !(rel < (gemv_is_int(type, K) ? kGemvIntBound : kGemvBound)) || !(rel3 < 2e-2);
    std::printf("  %s gemv non-finite x %-5s: %lld outputs wrong, finite row rel=%.2e, tiny row rel=%.2e\n",
                fail ? "FAIL" : "ok  ", ref::type_name(type), bad, rel, rel3);
    b.release();
    return fail ? 1 : 0;
}

// gemv_multi_<t> (four projections of one x in one launch) against each projection alone on
// gemv_<t> (2 rows a warp) and gemv4_<t> (4): every output bit-equal. Segments of different N,
// one in the q/gate split layout, grids of 256 and 64 threads; poisoned outputs. With `mr`, the
// multi-row launch (MultiGemvArgs::mr = M: every x row in each block, grid.y 1, 2 rows a warp,
// gemv_int_mr_body) against the same block-per-row references.
typedef void (*MultiFn)(MultiGemvArgs);
static MultiFn multi_fn(int type) {
    switch (type) {
        case ref::Q4_K: return gemv_multi_q4_k;
        case ref::Q5_K: return gemv_multi_q5_k;
        case ref::Q6_K: return gemv_multi_q6_k;
        case ref::Q8_0: return gemv_multi_q8_0;
        case ref::IQ4_XS: return gemv_multi_iq4_xs;
        case ref::MXFP4: return gemv_multi_mxfp4;
        case ref::BF16: return gemv_multi_bf16;
        default: return gemv_multi_q3_k;
    }
}
static int test_multi(int type, int M, ref::Rng& rng, bool mr = false) {
    const int K = 2048, S = 4;
    const int Ns[S] = {200, 64, 30, 36};  // segment 1: layout 1 with 2 heads of 16
    const int64_t rb = ref::row_bytes(type, K);
    std::vector<float> x(size_t(M) * K);
    for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
    EmuBackend b;
    const float* dx = b.upload(x);
    MultiGemvArgs m{};
    long long bad = 0;
    size_t total = 0;
    std::vector<float*> want(S), got(S);
    for (int s = 0; s < S; s++) {
        const std::vector<uint8_t> w = ref::random_weights(type, Ns[s], K, rng);
        GemmArgs a{};
        a.w = b.upload(w);
        a.w_row_bytes = rb;
        a.x = dx;
        a.ldx = K;
        a.M = M;
        a.N = Ns[s];
        a.K = K;
        a.x_div = 1;
        if (s == 1) {
            a.layout = 1;
            a.n_head = 2;
            a.head_dim = 16;
        }
        const size_t ny = size_t(M) * Ns[s];
        want[s] = b.alloc<float>(ny);
        got[s] = b.alloc<float>(ny);
        b.poison(want[s], ny);
        b.poison(got[s], ny);
        a.y = want[s];
        a.ldy = Ns[s];
        // The single launch: gemv for the first segment, gemv4 for the second (any rows per warp
        // give the same sums), gemv for the others.
        const int v = s == 1 ? V_GEMV4 : V_GEMV, threads = 128, cols = (threads / 32) * (s == 1 ? 4 : 2);
        b.gemm(gemm_fn(type, v), unsigned((Ns[s] + cols - 1) / cols), unsigned(M), threads, 0, a);
        a.y = got[s];
        m.seg[s] = a;
        total += ny;
    }
    for (int threads : {256, 64}) {
        int end = 0;
        for (int s = 0; s < S; s++) {
            m.rw[s] = s == 0 && !mr ? 4 : 2;  // segment 0 on gemv4's body, the others on gemv's
            const int cols = m.rw[s] * (threads / 32);
            end += (Ns[s] + cols - 1) / cols;
            m.block_end[s] = end;
            b.poison(got[s], size_t(M) * Ns[s]);
        }
        m.n_seg = S;
        m.mr = mr ? M : 0;
        MultiFn f = multi_fn(type);
        emu::launch({unsigned(end), mr ? 1u : unsigned(M), 1}, {unsigned(threads), 1, 1}, [&] { f(m); });
        for (int s = 0; s < S; s++)
            for (size_t i = 0; i < size_t(M) * Ns[s]; i++)
                bad += std::memcmp(&got[s][i], &want[s][i], 4) != 0 || want[s][i] != want[s][i];
    }
    std::printf("  %s gemv_multi%s %-5s M=%d K=%d 4 segments: %lld of %zu outputs differ\n", bad ? "FAIL" : "ok  ",
                mr ? " (rows in one block)" : "", ref::type_name(type), M, K, bad, 2 * total);
    b.release();
    return bad ? 1 : 0;
}

// gemvr_<t> / gemvr4_<t> (the persistent multi-row GEMV) against gemv4_<t> launched over the
// same rows (grid.y = M): every output bit-equal, for 1..4 x rows, K up to 4096, N not a
// multiple of a block's rows, grids smaller than the row groups (each block walks several), and
// 64-thread blocks. Poisoned outputs.
typedef void (*GemmFnR)(GemmArgs);
static GemmFnR gemvr_fn(int type, bool four) {
    switch (type) {
#define GEMVR_CASE(T, name) \
    case T: return four ? gemvr4_##name : gemvr_##name;
        GEMVR_CASE(ref::Q4_K, q4_k)
        GEMVR_CASE(ref::Q5_K, q5_k)
        GEMVR_CASE(ref::Q6_K, q6_k)
        GEMVR_CASE(ref::Q8_0, q8_0)
        GEMVR_CASE(ref::Q4_0, q4_0)
        GEMVR_CASE(ref::Q4_1, q4_1)
        GEMVR_CASE(ref::Q5_0, q5_0)
        GEMVR_CASE(ref::Q5_1, q5_1)
        GEMVR_CASE(ref::IQ4_NL, iq4_nl)
        GEMVR_CASE(ref::IQ4_XS, iq4_xs)
        GEMVR_CASE(ref::MXFP4, mxfp4)
        GEMVR_CASE(ref::Q2_K, q2_k)
        GEMVR_CASE(ref::Q3_K, q3_k)
#undef GEMVR_CASE
        default: return nullptr;
    }
}
static int test_gemvr(int type, ref::Rng& rng) {
    struct Shape { int M, N, K, threads, grid; };
    const Shape shapes[] = {{1, 1000, 2048, 256, 5}, {1, 37, 256, 64, 1}, {2, 300, 4096, 128, 3},
                            {3, 130, 2048, 64, 7}, {4, 257, 1024, 256, 2}, {4, 64, 4096, 64, 64},
                            {1, 517, 4096, 128, 3}};
    int fails = 0;
    for (const Shape& sh : shapes) {
        if (sh.K % ref::block_elems(type) != 0) continue;
        const int64_t rb = ref::row_bytes(type, sh.K);
        std::vector<float> x(size_t(sh.M) * sh.K);
        for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
        const std::vector<uint8_t> w = ref::random_weights(type, sh.N, sh.K, rng);
        EmuBackend b;
        GemmArgs a{};
        a.w = b.upload(w);
        a.w_row_bytes = rb;
        a.x = b.upload(x);
        a.ldx = sh.K;
        a.M = sh.M;
        a.N = sh.N;
        a.K = sh.K;
        a.x_div = 1;
        a.ldy = sh.N;
        const size_t ny = size_t(sh.M) * sh.N;
        float* want = b.alloc<float>(ny);
        float* got = b.alloc<float>(ny);
        b.poison(want, ny);
        b.poison(got, ny);
        a.y = want;
        const int cols = 4 * (sh.threads / 32);
        b.gemm(gemm_fn(type, V_GEMV4), unsigned((sh.N + cols - 1) / cols), unsigned(sh.M), sh.threads, 0, a);
        a.y = got;
        const size_t smem = size_t(sh.M) * size_t(sh.K / 8 + sh.K / 32) * 16;
        b.gemm(gemvr_fn(type, sh.M > 1), unsigned(sh.grid), 1, sh.threads, smem, a);
        long long bad = 0;
        for (size_t i = 0; i < ny; i++) bad += std::memcmp(&got[i], &want[i], 4) != 0 || want[i] != want[i];
        std::printf("  %s gemvr %-5s M=%d N=%-4d K=%-4d threads=%-3d grid=%-2d: %lld of %zu outputs differ\n",
                    bad ? "FAIL" : "ok  ", ref::type_name(type), sh.M, sh.N, sh.K, sh.threads, sh.grid, bad, ny);
        fails += bad != 0;
        // The bulk-fed form (one x row; row bytes whole 16-byte vectors): the same bits.
        for (int which : {4, 2, 44}) {
            if ((sh.M == 1) == (which == 44) || rb % 16 != 0) continue;
            const size_t tsmem = gemvt_smem_bytes(sh.K, rb, sh.threads, which == 4 ? 4 : 2, sh.M);
            if (tsmem > 232448) continue;
            b.poison(got, ny);
            b.gemm(gemm_fn(type, which == 4 ? V_GEMVT : which == 2 ? V_GEMVT2 : V_GEMVT4), unsigned(sh.grid), 1,
                   sh.threads, tsmem, a);
            long long badt = 0;
            for (size_t i = 0; i < ny; i++) badt += std::memcmp(&got[i], &want[i], 4) != 0 || want[i] != want[i];
            std::printf("  %s gemvt%d %-5s M=%d N=%-4d K=%-4d threads=%-3d grid=%-2d: %lld of %zu outputs differ\n",
                        badt ? "FAIL" : "ok  ", which, ref::type_name(type), sh.M, sh.N, sh.K, sh.threads, sh.grid, badt, ny);
            fails += badt != 0;
        }
        b.release();
    }
    return fails;
}

// The decode FFN's side-by-side launches (cuda/ops/fused.rs expert_pairs, expert_downs): the
// routed experts' paired gate/up (one-row MoE tiles from the ids) and the shared expert's
// (dense) as two segments of one gemv_multi_<t> launch with grid.y = the tiles, and their down
// projections as two segments of one mmv_multi_<t> launch; every output bit-equal to its own
// launch (the shared segment's blocks past row 0 must exit without writing). Poisoned outputs.
typedef void (*MmvMultiFn)(MultiGemvArgs);
static MmvMultiFn mmv_multi_fn(int type) {
    switch (type) {
        case ref::Q4_K: return mmv_multi_q4_k;
        case ref::Q5_K: return mmv_multi_q5_k;
        case ref::Q6_K: return mmv_multi_q6_k;
        case ref::Q8_0: return mmv_multi_q8_0;
        case ref::IQ4_XS: return mmv_multi_iq4_xs;
        case ref::MXFP4: return mmv_multi_mxfp4;
        case ref::BF16: return mmv_multi_bf16;
        default: return mmv_multi_q3_k;
    }
}
static int test_expert_side_by_side(int type, ref::Rng& rng) {
    const int K = 2048, F = 64, E = 8, topk = 4, KD = 512, ND = 96;  // F: expert width; down: KD -> ND
    const int64_t rbd = ref::row_bytes(type, KD);
    std::vector<float> x(K), h(size_t(topk + 1) * KD);
    for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
    for (auto& v : h) do v = float(2.0 * rng.uniform() - 1.0); while (v == 0.0f);
    const std::vector<int32_t> ids = ref::route_random(1, topk, E, rng);
    EmuBackend b;
    const float* dx = b.upload(x);
    const float* dh = b.upload(h);  // rows 0..topk-1: the routed pairs' inputs, row topk: the shared one
    long long bad = 0, total = 0;
    auto check = [&](const float* got, const float* want, size_t n) {
        for (size_t i = 0; i < n; i++) bad += std::memcmp(&got[i], &want[i], 4) != 0 || want[i] != want[i];
        total += n;
    };
    // Gate/up: routed (segment 0) and shared (segment 1), paired with the SwiGlu output.
    GemmArgs seg[2];
    float* want[2][3];
    float* got[2][3];
    for (int s = 0; s < 2; s++) {
        const bool moe = s == 0;
        const int rows = moe ? topk : 1;
        GemmArgs a = gemv_case_args(b, type, moe, rows, F, K, E, topk, dx, moe ? b.upload(ids) : nullptr, rng);
        a.w2 = b.upload(ref::random_weights(type, int64_t(moe ? E : 1) * F, K, rng));
        for (int o = 0; o < 3; o++) {
            want[s][o] = b.alloc<float>(size_t(rows) * F);
            got[s][o] = b.alloc<float>(size_t(rows) * F);
            b.poison(want[s][o], size_t(rows) * F);
            b.poison(got[s][o], size_t(rows) * F);
        }
        a.ldy = a.ldy2 = a.ldy3 = F;
        a.y = want[s][0];
        a.y2 = want[s][1];
        a.y3 = want[s][2];
        b.gemm(gemm_fn(type, V_GEMV), unsigned(F / 2), unsigned(rows), 64, 0, a);  // 2 columns a block
        a.y = got[s][0];
        a.y2 = got[s][1];
        a.y3 = got[s][2];
        seg[s] = a;
    }
    MultiGemvArgs m{};
    m.seg[0] = seg[0];
    m.seg[1] = seg[1];
    m.rw[0] = m.rw[1] = 2;
    m.block_end[0] = F / 8;  // 256 threads: 8 columns a block
    m.block_end[1] = m.block_end[2] = m.block_end[3] = F / 4;
    m.n_seg = 2;
    MultiFn f = multi_fn(type);
    emu::launch({unsigned(F / 4), unsigned(topk), 1}, {256u, 1, 1}, [&] { f(m); });
    for (int s = 0; s < 2; s++)
        for (int o = 0; o < 3; o++) check(got[s][o], want[s][o], size_t(s == 0 ? topk : 1) * F);
    // Down: routed pairs read rows of h (x_div 1: pair input), the shared one its row.
    GemmArgs d[2];
    float* dw[2];
    float* dg[2];
    for (int s = 0; s < 2; s++) {
        const bool moe = s == 0;
        const int rows = moe ? topk : 1;
        GemmArgs a{};
        a.w = b.upload(ref::random_weights(type, int64_t(moe ? E : 1) * ND, KD, rng));
        a.w_row_bytes = rbd;
        a.w_expert_bytes = moe ? rbd * ND : 0;
        a.x = moe ? dh : dh + size_t(topk) * KD;
        a.ldx = KD;
        a.M = rows;
        a.N = ND;
        a.K = KD;
        a.x_div = 1;
        if (moe) {
            a.n_expert = E;
            a.tile_expert = b.upload(ids);
        }
        dw[s] = b.alloc<float>(size_t(rows) * ND);
        dg[s] = b.alloc<float>(size_t(rows) * ND);
        b.poison(dw[s], size_t(rows) * ND);
        b.poison(dg[s], size_t(rows) * ND);
        a.ldy = ND;
        a.y = dw[s];
        b.gemm(gemm_fn(type, V_MMV), 3u, unsigned(rows), MMV_THREADS, 0, a);
        a.y = dg[s];
        d[s] = a;
    }
    MultiGemvArgs md{};
    md.seg[0] = d[0];
    md.seg[1] = d[1];
    md.block_end[0] = 2;  // other grid widths than the single launches': the same rows, the same bits
    md.block_end[1] = md.block_end[2] = md.block_end[3] = 7;
    md.n_seg = 2;
    MmvMultiFn fm = mmv_multi_fn(type);
    emu::launch({7u, unsigned(topk), 1}, {unsigned(MMV_THREADS), 1, 1}, [&] { fm(md); });
    for (int s = 0; s < 2; s++) check(dg[s], dw[s], size_t(s == 0 ? topk : 1) * ND);
    std::printf("  %s routed + shared side by side %-5s (gemv_multi paired, mmv_multi): %lld of %lld outputs differ\n",
                bad ? "FAIL" : "ok  ", ref::type_name(type), bad, total);
    b.release();
    return bad ? 1 : 0;
}

// gemvi_<t> / gemvi_multi_<t> (the integer GEMV body alone, more blocks a multiprocessor) and
// mmvi_<t> / mmvi_multi_<t> (mmv's geometry on the integer arithmetic) against gemv_<t>, every
// output bit for bit: dense (2 x rows, grid.y), one-row MoE tiles from the ids, paired gate/up
// (gemvi), two segments of one multi launch; K 256 to 2,048 for gemvi, 256 to 1,024 for mmvi
// (use_mmv's K); grids and block sizes other than the reference's. Poisoned outputs.
typedef void (*MultiIntFn)(MultiGemvArgs);
static void int_multi_fns(int type, MultiIntFn& gi, MultiIntFn& mi) {
    switch (type) {
#define INT_CASE(T, name)             \
    case T:                           \
        gi = gemvi_multi_##name;      \
        mi = mmvi_multi_##name;       \
        return;
        INT_CASE(ref::Q4_K, q4_k)
        INT_CASE(ref::Q5_K, q5_k)
        INT_CASE(ref::Q6_K, q6_k)
        INT_CASE(ref::Q8_0, q8_0)
        INT_CASE(ref::Q4_0, q4_0)
        INT_CASE(ref::Q4_1, q4_1)
        INT_CASE(ref::Q5_0, q5_0)
        INT_CASE(ref::Q5_1, q5_1)
        INT_CASE(ref::IQ4_NL, iq4_nl)
        INT_CASE(ref::IQ4_XS, iq4_xs)
        INT_CASE(ref::MXFP4, mxfp4)
        INT_CASE(ref::Q2_K, q2_k)
        INT_CASE(ref::Q3_K, q3_k)
#undef INT_CASE
        default: gi = mi = nullptr;
    }
}
static int test_int_kernels(int type, int K, ref::Rng& rng) {
    const int N = 100, E = 6, topk = 3, M = 2;
    const bool mmvi = K <= 1024;
    MultiIntFn gi_multi, mi_multi;
    int_multi_fns(type, gi_multi, mi_multi);
    std::vector<float> x(size_t(M) * K);
    for (auto& v : x) do v = float(4.0 * rng.uniform() - 2.0); while (v == 0.0f);
    EmuBackend b;
    long long bad = 0, total = 0;
    auto check = [&](const float* got, const float* want, size_t n) {
        for (size_t i = 0; i < n; i++) bad += std::memcmp(&got[i], &want[i], 4) != 0 || want[i] != want[i];
        total += n;
    };
    const float* dx = b.upload(x);
    // Case 0: dense over M x rows (grid.y); case 1: one-row MoE tiles from the ids (x row t /
    // x_div); case 2: dense, paired with a second weight (gate and up rows of a column, y3 the
    // SwiGlu), gemvi only.
    GemmArgs seg[2];
    float* want_seg[2];
    size_t ny_seg[2];
    for (int c = 0; c < 3; c++) {
        const bool moe = c == 1, paired = c == 2;
        const int rows = moe ? topk : M;
        const int32_t* ids = moe ? b.upload(ref::route_random(1, topk, E, rng)) : nullptr;
        GemmArgs a = gemv_case_args(b, type, moe, rows, N, K, E, topk, dx, ids, rng);
        const size_t ny = size_t(rows) * N;
        float* want = b.alloc<float>(ny);
        float* got = b.alloc<float>(ny);
        float *want2 = nullptr, *got2 = nullptr, *want3 = nullptr, *got3 = nullptr;
        a.ldy = N;
        if (paired) {
            a.w2 = b.upload(ref::random_weights(type, N, K, rng));
            want2 = b.alloc<float>(ny);
            got2 = b.alloc<float>(ny);
            want3 = b.alloc<float>(ny);
            got3 = b.alloc<float>(ny);
            a.ldy2 = a.ldy3 = N;
        }
        b.poison(want, ny);
        a.y = want;
        if (paired) {
            b.poison(want2, ny);
            b.poison(want3, ny);
            a.y2 = want2;
            a.y3 = want3;
        }
        const int cols = paired ? 8 : 16;  // 256 threads: 8 warps of 1 (paired) or 2 columns
        b.gemm(gemm_fn(type, V_GEMV), unsigned((N + cols - 1) / cols), unsigned(rows), 256, 0, a);
        // gemvi at 64 threads (2 warps: 2 or 4 columns a block).
        b.poison(got, ny);
        a.y = got;
        if (paired) {
            b.poison(got2, ny);
            b.poison(got3, ny);
            a.y2 = got2;
            a.y3 = got3;
        }
        const int cols64 = paired ? 2 : 4;
        b.gemm(gemm_fn(type, V_GEMVI), unsigned((N + cols64 - 1) / cols64), unsigned(rows), 64, 0, a);
        check(got, want, ny);
        if (paired) {
            check(got2, want2, ny);
            check(got3, want3, ny);
            continue;
        }
        if (mmvi) {  // mmvi: 3 blocks walking the row steps grid-stride
            b.poison(got, ny);
            b.gemm(gemm_fn(type, V_MMVI), 3u, unsigned(rows), MMV_THREADS, 0, a);
            check(got, want, ny);
        }
        seg[c] = a;
        want_seg[c] = want;
        ny_seg[c] = ny;
    }
    // Two segments (the MoE tiles beside the dense rows: grid.y = the larger) of one launch.
    for (int which = 0; which < (mmvi ? 2 : 1); which++) {
        MultiGemvArgs m{};
        m.seg[0] = seg[1];
        m.seg[1] = seg[0];
        float* got0 = b.alloc<float>(ny_seg[1]);
        float* got1 = b.alloc<float>(ny_seg[0]);
        b.poison(got0, ny_seg[1]);
        b.poison(got1, ny_seg[0]);
        m.seg[0].y = got0;
        m.seg[1].y = got1;
        m.rw[0] = m.rw[1] = 2;
        m.n_seg = 2;
        const unsigned threads = which == 0 ? 128 : MMV_THREADS;
        if (which == 0) {
            const int cols = 2 * 4;
            m.block_end[0] = (N + cols - 1) / cols;
            m.block_end[1] = m.block_end[0] + (N + cols - 1) / cols;
        } else {
            m.block_end[0] = 2;
            m.block_end[1] = 5;
        }
        m.block_end[2] = m.block_end[3] = m.block_end[1];
        MultiIntFn f = which == 0 ? gi_multi : mi_multi;
        emu::launch({unsigned(m.block_end[1]), unsigned(std::max(topk, M)), 1}, {threads, 1, 1}, [&] { f(m); });
        check(got0, want_seg[1], ny_seg[1]);
        check(got1, want_seg[0], ny_seg[0]);
    }
    std::printf("  %s gemvi%s %-6s K=%-4d (dense, MoE tiles, paired, multi): %lld of %lld outputs differ\n",
                bad ? "FAIL" : "ok  ", mmvi ? " + mmvi" : "", ref::type_name(type), K, bad, total);
    b.release();
    return bad ? 1 : 0;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "quick";
    // `pieces`: only the per-format front ends (pieces, dequant8, dequant_rows, dequant_f16).
    const bool pieces_only = argc > 1 && std::string(argv[1]) == "pieces";
    // `new`: the GEMM/GEMV matrix only for the legacy, codebook and low-bit K formats;
    // `newquick`: of those, only the dense M%BM!=0 and the MoE down cases (every variant).
    const bool new_quick = argc > 1 && std::string(argv[1]) == "newquick";
    const bool new_only = new_quick || (argc > 1 && std::string(argv[1]) == "new");
    auto is_new = [](int t) {
        return t == ref::Q4_0 || t == ref::Q4_1 || t == ref::Q5_0 || t == ref::Q5_1 || t == ref::IQ4_NL ||
               t == ref::IQ4_XS || t == ref::MXFP4 || t == ref::Q2_K || t == ref::Q3_K;
    };
    // "swap": only the swapped tiles (gemm_<t>_s16 / _s32) of the correctness matrix, every type.
    const bool only_swap = argc > 1 && std::string(argv[1]) == "swap";
    // "wg": only the wgmma tiles (gemm_<t>_w32 / _w64 / _w128) of the correctness matrix, every type.
    const bool only_wg = argc > 1 && std::string(argv[1]) == "wg";
    const bool only_wgx = argc > 1 && std::string(argv[1]) == "wgx";  // the x-resident tiles alone
    const bool only_xs = argc > 1 && std::string(argv[1]) == "xs128";  // the warp-specialised one alone
    // "gemv": only the GEMV kernels (gemv_<t>, mmv_<t>) of the correctness matrix, every type.
    const bool only_gemv = argc > 1 && std::string(argv[1]) == "gemv";
    ref::Rng rng(20260101);
    EmuBackend b;
    int fails = 0;
    // "gemvr": the persistent multi-row GEMV against gemv4, every integer format.
    if (argc > 1 && std::string(argv[1]) == "gemvr") {
        for (int t : ref::ALL_TYPES)
            if (gemvr_fn(t, false)) fails += test_gemvr(t, rng);
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "int": gemvi_<t> / mmvi_<t> and their multi forms against gemv_<t>, every integer format.
    if (argc > 1 && std::string(argv[1]) == "int") {
        for (int t : ref::ALL_TYPES) {
            MultiIntFn gi, mi;
            int_multi_fns(t, gi, mi);
            if (gi == nullptr) continue;
            for (int K : {256, 512, 1024, 2048}) fails += test_int_kernels(t, K, rng);
        }
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "route": only moe_route (one block and several, with the per-block counts launch).
    if (argc > 1 && std::string(argv[1]) == "route") {
        fails += run_route_cases(b, rng, argc > 2 && std::string(argv[2]) == "big");
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "gated": the gated gate/up tiles against two unfused launches of the same height.
    if (argc > 1 && std::string(argv[1]) == "gated") {
        for (int t : {ref::Q4_K, ref::Q5_K, ref::Q6_K, ref::Q8_0, ref::IQ4_XS, ref::MXFP4, ref::BF16, ref::Q3_K})
            for (int v : {V_W32, V_W128})
                for (int tokens : {29, 70}) fails += check_gated(b, t, v, tokens, 200, 512, false, rng);
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "ws": the warp-specialised gated tile gs128 against two unfused w128 launches, bit for bit,
    // every type whose stages fit.
    if (argc > 1 && std::string(argv[1]) == "ws") {
        for (int t : {ref::Q4_K, ref::IQ4_XS, ref::MXFP4, ref::Q4_0, ref::Q5_K}) {
            if (ws_smem(t) > 232448) continue;
            for (int tokens : {29, 70, 300}) fails += check_gated(b, t, V_W128, tokens, 200, 512, false, rng, 128);
        }
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "ws256": gemm_<t>_gs256 (tiles of 256 rows: one half, two halves, a full tile and a
    // remainder) against the unfused 128-row launches, bit for bit.
    if (argc > 1 && std::string(argv[1]) == "ws256") {
        const std::string only = argc > 2 ? "," + std::string(argv[2]) + "," : "";
        for (int t : {ref::Q4_K, ref::MXFP4, ref::IQ4_XS})
            if (only.empty() || only.find("," + std::string(ref::type_name(t)) + ",") != std::string::npos)
                for (int tokens : {70, 700, 1100}) fails += check_gated(b, t, V_W128, tokens, 200, 512, false, rng, 256);
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "ws256a": gemm_<t>_gs256a (gs256 with two A stages, TALLY_WS256=a2) on the same cases,
    // against the unfused 128-row launches, bit for bit (so gs256's outputs too).
    if (argc > 1 && std::string(argv[1]) == "ws256a") {
        const std::string only = argc > 2 ? "," + std::string(argv[2]) + "," : "";
        for (int t : {ref::Q4_K, ref::MXFP4, ref::IQ4_XS, ref::Q4_0})
            if (only.empty() || only.find("," + std::string(ref::type_name(t)) + ",") != std::string::npos)
                for (int tokens : {70, 700, 1100}) fails += check_gated(b, t, V_W128, tokens, 200, 512, false, rng, 256, true);
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // "multirow": gemv_multi with every x row of a 2-4 row batch in one block, 7 integer formats
    // (those multi_fn maps), against a block per row.
    if (argc > 1 && std::string(argv[1]) == "multirow") {
        for (int t : {ref::Q4_K, ref::Q5_K, ref::Q6_K, ref::Q8_0, ref::IQ4_XS, ref::MXFP4, ref::Q3_K})
            for (int M : {2, 3, 4}) fails += test_multi(t, M, rng, true);
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    if (argc > 1 && std::string(argv[1]) == "paired") {
        for (int t : {ref::Q4_K, ref::Q5_K, ref::Q6_K, ref::Q8_0, ref::IQ4_XS, ref::MXFP4, ref::BF16, ref::Q3_K}) {
            for (bool moe : {false, true}) fails += test_paired(t, moe, rng);
            for (int M : {1, 2}) fails += test_multi(t, M, rng);
            fails += test_nonfinite_x(t, rng);
            fails += test_expert_side_by_side(t, rng);
        }
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    // swap, wg, wgx, gemv: a second argument limits the cases to those types (comma-separated
    // names: "q4_k,q6_k").
    const std::string only_types = argc > 2 ? "," + std::string(argv[2]) + "," : "";
    auto type_off = [&](int t) { return !only_types.empty() && only_types.find("," + std::string(ref::type_name(t)) + ",") == std::string::npos; };
    if (only_swap || only_wg || only_wgx || only_xs) {
        for (const GemmCase& c : correctness_cases(true)) {
            if (only_xs ? c.variant != V_XS128
                        : only_swap ? !variant_swap(c.variant) : only_wgx ? !variant_wgx(c.variant) : !variant_wg(c.variant))
                continue;
            if (type_off(c.type)) continue;
            fails += !run_case(b, c, rng, false).pass;
            std::fflush(stdout);
        }
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    if (only_gemv) {
        for (const GemmCase& c : correctness_cases(true)) {
            if (c.variant != V_GEMV && c.variant != V_MMV && c.variant != V_GEMV4) continue;
            if (type_off(c.type)) continue;
            fails += !run_case(b, c, rng, false).pass;
            std::fflush(stdout);
        }
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    std::printf("== pieces and dequant8 (direct calls)\n");
    fails += test_pieces<QT_Q4_K>(rng) + test_pieces<QT_Q5_K>(rng) + test_pieces<QT_Q6_K>(rng) + test_pieces<QT_Q8_0>(rng) +
             test_pieces<QT_BF16>(rng) + test_pieces<QT_F16>(rng) + test_pieces<QT_F32>(rng) + test_pieces<QT_Q4_0>(rng) +
             test_pieces<QT_Q4_1>(rng) + test_pieces<QT_Q5_0>(rng) + test_pieces<QT_Q5_1>(rng) +
             test_pieces<QT_IQ4_NL>(rng) + test_pieces<QT_IQ4_XS>(rng) + test_pieces<QT_MXFP4>(rng) +
             test_pieces<QT_Q2_K>(rng) + test_pieces<QT_Q3_K>(rng);
    std::printf("== dequant_rows kernel\n");
    const auto& types = ref::ALL_TYPES;
    for (int t : types) fails += !run_dequant_rows_case(b, t, rng);
    std::printf("== dequant_f16 and cast_f16_rows kernels (operands of the cuBLAS path)\n");
    for (int t : types) fails += test_f16_operands(t, 0, rng);
    fails += test_f16_operands(ref::Q4_K, 1, rng) + test_f16_operands(ref::Q6_K, 1, rng);
    if (pieces_only) {
        std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
        return fails ? 1 : 0;
    }
    std::printf("== moe_route kernel\n");
    if (!new_only) fails += run_route_cases(b, rng, false);
    std::printf("== gemm / gemv kernels\n");
    int n = 0;
    for (const GemmCase& c : correctness_cases(true)) {
        if (quick && c.type != ref::Q4_K && c.type != ref::Q6_K && c.type != ref::Q8_0 && c.type != ref::IQ4_XS &&
            c.type != ref::MXFP4 && c.type != ref::Q3_K)
            continue;
        if (new_only && !is_new(c.type)) continue;
        if (new_quick && c.name != "dense M%BM!=0 N%BN!=0" && c.name != "moe down random") continue;
        fails += !run_case(b, c, rng, false).pass;
        n++;
        std::fflush(stdout);
    }
    std::printf("== f32 SIMT gemm (repeatability across warp orders: emu/simt_test.cpp)\n");
    for (const GemmCase& c : simt_cases()) {
        if (new_only) break;
        fails += !run_case(b, c, rng, false).pass;
        std::fflush(stdout);
    }
    std::printf("%s: %d failures\n", fails ? "FAILED" : "PASSED", fails);
    return fails ? 1 : 0;
}
