#!/usr/bin/env bash
# One device call: the decode GEMV kernels (gemv_<t>, mmv_<t>) of lab/gemm, checked against
# float64 on every type and timed on the 35B model's decode shapes (weights streamed from DRAM).
# Needs nvcc only (no Rust, no model file). About 2 minutes on a fresh H200 machine.
set -euo pipefail
source "$(dirname "$0")/env.sh"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
    lab/gemm/bench.cu -o /tmp/gemm_bench
/tmp/gemm_bench --decode 2>&1 | tee "$OUT/lab-decode.log"
