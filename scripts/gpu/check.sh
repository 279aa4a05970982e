#!/usr/bin/env bash
# The GPU correctness check, one call: kernel lab harnesses (each kernel against a CPU reference,
# with timings), then the CUDA backend against the CPU backend node by node on synthetic models
# (tiny, tiny-odd, mid), then the device's peaks. Prints a short table last.
#   scripts/gpu/check.sh [--quick]     (LABS="gemm" runs a subset of the labs; LABS="" none)
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
quick="${1:-}"
summary=()
row() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

# 1. lab harnesses: build all in parallel, run one after another.
read -r -a labs <<< "${LABS-gemm delta attention}"
for l in "${labs[@]+"${labs[@]}"}"; do
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
      "lab/$l/bench.cu" -o "/tmp/lab_$l" > "$OUT/lab_${l}_build.log" 2>&1; echo $? > "/tmp/lab_$l.rc" ) &
done
wait
for l in "${labs[@]+"${labs[@]}"}"; do
  if [ "$(cat /tmp/lab_$l.rc)" != 0 ]; then row "lab $l" "BUILD FAILED (see lab_${l}_build.log)"; tail -20 "$OUT/lab_${l}_build.log"; continue; fi
  timeout 150 "/tmp/lab_$l" $quick > "$OUT/lab_$l.log" 2>&1; rc=$?
  tail -40 "$OUT/lab_$l.log"
  row "lab $l" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done

# 2. the backend against the CPU reference.
for spec in "tiny q8_0 1" "tiny-odd bf16 2" "tiny q4_k_m 3" "mid q4_k_m 4"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$TALLY" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1 || { row "check $1 $2" "synth failed"; continue; }
  toks="1,37,100"; [ "$1" = mid ] && toks="1,100,700"
  timeout 300 "$TALLY" check --model "$f" --backend cuda --tokens "$toks" -n 3 > "$OUT/check_$1_$2.log" 2>&1; rc=$?
  cat "$OUT/check_$1_$2.log" | tail -12
  row "check $1 $2" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done

# 3. the device's ceilings, and a first timing of the mid model.
"$TALLY" machine --backend cuda | tee "$OUT/machine.txt"
if [ -f /tmp/mid-q4_k_m.gguf ]; then
  timeout 120 "$TALLY" bench --model /tmp/mid-q4_k_m.gguf --backend cuda -p 512,2048 -n 32 -r 3 --out-dir "$OUT" > "$OUT/bench_mid.md" 2>&1
  cat "$OUT/bench_mid.md"
fi

printf '\n== summary ==\n'; printf '%s\n' "${summary[@]}"
