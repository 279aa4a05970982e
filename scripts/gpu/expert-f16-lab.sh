#!/usr/bin/env bash
# Issue 14: would an f16 copy of the routed experts (decoded once, like the dense weights' kept
# copies) make prefill's expert GEMMs faster than decoding the GGUF blocks in every tile? lab/gemm
# times the MoE shapes of the 35B model (256 experts, top 8; gate/up 2048 -> 512, down 512 ->
# 2048) at 512, 2,048 and 8,192 tokens on every tile, for F16 weights against Q6_K and Q4_K (the
# Q4_K_M mix's types), and the gated gate/up tile for F16 against Q4_K. Each timed case is
# also checked against the CPU reference (a failure is listed under the summary).
# HERE first: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
#   -I crates/engine/src/cuda/kernels lab/gemm/bench.cu -L/opt/cu13/nvidia/cu13/lib -o .carry/lab/gemm_bench
# Carry .carry/lab.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
L=.carry/lab/gemm_bench
t0=$(date +%s)
for t in f16 q6_k q4_k; do
    timeout 240 $L --wg --only-time --only $t > "$OUT/wg-$t.txt" 2>&1
    echo "wg $t rc=$? $(( $(date +%s) - t0 )) s"
done
for t in f16 q4_k; do
    timeout 200 $L --gated --only $t > "$OUT/gated-$t.txt" 2>&1
    echo "gated $t rc=$? $(( $(date +%s) - t0 )) s"
done
for t in f16 q6_k q4_k; do
    echo "== wg $t"
    sed -n '/== SUMMARY/,$p' "$OUT/wg-$t.txt" | grep -E "moe|FAIL" | cut -c1-200
done
for t in f16 q4_k; do
    echo "== gated $t"
    grep -E "time|PASS|FAIL" "$OUT/gated-$t.txt" | tail -12 | cut -c1-200
done
