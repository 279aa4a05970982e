// The f32 GEMMs (gemm_f32_simt, _simt_m32, _tf32, _tf32_m32) on the CPU emulator: every case of
// simt_cases() (cases.h) against float64 (relative Frobenius error < kSimtBound = 2e-6, every
// output written, padding untouched), run twice under different warp interleavings (scheduler
// seeds) and compared bit for bit. Run from the repository root: sh lab/gemm/emu/simt.sh
#include <cuda_fp16.h>  // the emulator (lab/gemm/emu), first on the include path

#include "gemm.cu"
#include "moe.cu"
#include "../cases.h"
#include "emu_backend.h"

int main() {
    ref::Rng rng(20261201);
    EmuBackend b;
    int fails = 0, n = 0;
    for (const GemmCase& c : simt_cases()) {
        const Setup s = make_setup(c, rng);
        const DevCase d = upload_case(b, s);
        std::vector<float> y[2];
        for (int run = 0; run < 2; run++) {
            emu::st().order_rng.seed(run == 0 ? 1u : 0x9E3779B9u + unsigned(n));
            b.poison(d.y, d.y_elems);
            b.gemm(gemm_fn(c.type, c.variant), d.gx, d.gy, d.threads, d.smem, d.args);
            y[run] = b.download(d.y, d.y_elems);
        }
        const CaseResult r = check_case(s, y[0], false);
        size_t differ = 0;
        for (size_t i = 0; i < y[0].size(); i++) differ += ref::f32_bits(y[0][i]) != ref::f32_bits(y[1][i]);
        std::printf("       grid %u x %u, x %s, W %s; second run (other warp order): %zu of %zu floats differ\n", d.gx, d.gy,
                    (reinterpret_cast<uintptr_t>(d.args.x) & 15) == 0 && d.args.ldx % 4 == 0 && c.K % 4 == 0 ? "16-byte" : "4-byte",
                    d.args.w_row_bytes % 16 == 0 ? "16-byte" : "4-byte", differ, y[0].size());
        fails += !r.pass || differ != 0;
        n++;
        b.release();
        std::fflush(stdout);
    }
    std::printf("%s: %d of %d cases failed\n", fails ? "FAILED" : "PASSED", fails, n);
    return fails ? 1 : 0;
}
