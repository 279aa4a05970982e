g++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels lab/gemm/emu/simt_test.cpp -o /tmp/gemm_simt_emu && /tmp/gemm_simt_emu
