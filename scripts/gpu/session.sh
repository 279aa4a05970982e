#!/usr/bin/env bash
# Everything one short GPU lease allows, in one call, ordered by value, each step bounded so the
# whole stays under ~9.5 minutes: the 35B synth file starts writing at once (CPU, background);
# the CUDA backend is checked against the CPU reference (tiny, tiny-odd, mid); the kernel labs run
# in quick mode; then tally (and llama.cpp, when its CUDA libraries were built on this machine)
# are timed on the 35B file. Logs and JSON land in $OUT; a short table prints last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T0=$(date +%s)
left() { echo $(( ${DEADLINE:-560} - ($(date +%s) - T0) )); }
summary=()
row() { summary+=("$(printf '%-30s %s' "$1" "$2")"); }
nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

BIG=/tmp/q4km.gguf
( "$TALLY" synth --preset 35b-a3b --quant q4_k_m --seed 1 --out "$BIG" -o json > "$OUT/synth_35b.json" 2>&1; echo $? > /tmp/synth.rc ) &
SYNTH=$!
for l in gemm delta attention; do
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I crates/engine/src/cuda/kernels \
      "lab/$l/bench.cu" -o "/tmp/lab_$l" > "$OUT/lab_${l}_build.log" 2>&1; echo $? > "/tmp/lab_$l.rc" ) &
done

for spec in "tiny q8_0 1 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,600"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$TALLY" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout $(( $(left) > 150 ? 150 : $(left) )) "$TALLY" check --model "$f" --backend cuda --tokens "$4" -n 2 > "$OUT/check_$1.log" 2>&1; rc=$?
  tail -8 "$OUT/check_$1.log"
  row "check $1 $2" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done

for l in gemm delta attention; do
  wait_s=0; while [ ! -f "/tmp/lab_$l.rc" ] && [ $wait_s -lt 60 ]; do sleep 2; wait_s=$((wait_s+2)); done
  if [ "$(cat /tmp/lab_$l.rc 2>/dev/null)" != 0 ]; then row "lab $l" "BUILD FAILED"; tail -5 "$OUT/lab_${l}_build.log"; continue; fi
  arg=--quick; [ $l = gemm ] && arg=""
  timeout $(( $(left) > 80 ? 60 : 20 )) "/tmp/lab_$l" $arg > "$OUT/lab_$l.log" 2>&1; rc=$?
  grep -E "FAIL|SUMMARY|verdict|PASS" "$OUT/lab_$l.log" | tail -6
  row "lab $l" "$([ $rc = 0 ] && echo ok || echo "rc=$rc")"
done

"$TALLY" machine --backend cuda -o json > "$OUT/machine.json" 2>&1 && row machine "ok" || row machine failed
wait $SYNTH; row "synth 35b-a3b q4_k_m" "rc=$(cat /tmp/synth.rc) $(grep -o '"seconds": [0-9.]*' $OUT/synth_35b.json)"
peer=()
if [ -f target/llama-cuda/bin/libllama.so ]; then export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"; peer=(--peer llama.cpp); fi
if [ "$(cat /tmp/synth.rc)" = 0 ] && [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 10 )) "$TALLY" bench --model "$BIG" --backend cuda -p 512,2048,8192 -n 32 -r 3 "${peer[@]}" --out-dir "$OUT" > "$OUT/bench_35b.md" 2>&1
  row "bench 35b" "rc=$?"; cat "$OUT/bench_35b.md"
fi
printf '\n== %ss used ==\n' $(( $(date +%s) - T0 )); printf '%s\n' "${summary[@]}"
