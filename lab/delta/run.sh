#!/usr/bin/env bash
# Build and run the delta / conv lab harness in one device call: lab/delta/run.sh [--quick] [--no-time]
# The full log goes to $OUT/delta_bench.log when $OUT is set (the device machine's result folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp}"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I crates/engine/src/cuda/kernels \
    lab/delta/bench.cu -o /tmp/delta_bench >"$out/delta_build.log" 2>&1
rc=$?
grep -E "entry function|registers|spill" "$out/delta_build.log"
if [ $rc -ne 0 ]; then cat "$out/delta_build.log"; exit $rc; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>/dev/null || true
/tmp/delta_bench "$@" 2>&1 | tee "$out/delta_bench.log"
exit "${PIPESTATUS[0]}"
