#!/usr/bin/env bash
# The integer decode GEMV (gemv_int_body in gemm.cu: x quantised to int16 per segment in shared
# memory, dp2a on the weights' bytes; issue 13's decode, issue 10 item 5's per-byte bar). Two
# calls on one warm machine.
#   PHASE=1: prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background; the lab's
#            check matrix and decode cases of the new build; `gemm_bench --decode --only-time` of
#            the base and the new build; ncu of gemv4_q4_k (new); tally check CUDA vs CPU (tiny
#            q8_0, mid q4_k_m/q8_0/mxfp4_moe/iq4_xs); the converter-made fixtures on CUDA.
#   PHASE=2 (within 30 s of phase 1): scripts/gpu/moe-swap.sh PHASE=2 (side-by-side bench per
#            mix: pp512, pp8192, tg128 against llama.cpp).
#   PHASE=one: one call for a follow-up change: prepare.sh in the background, scripts/gpu/
#            ncu-step.sh (per-kernel step table), tally check on mid q4_k_m and iq4_xs, then the
#            side-by-side bench of MIXES (default q4_k_m).
# HERE first: .carry/lab/gemm_bench_base (the base tree with this lab/gemm/bench.cu) and
# .carry/lab/gemm_bench (lab/gemm/README.md), scripts/gpu/pack.sh --llama.
# Carry .carry/bin, .carry/lab, .carry/llama.cpp.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
if [ "${PHASE:-1}" = 2 ]; then exec env PHASE=2 scripts/gpu/moe-swap.sh; fi
work_dir /tmp/gemv-int
if [ "${PHASE:-1}" = one ]; then
  t0=$(date +%s)
  FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
  scripts/gpu/ncu-step.sh > "$OUT/ncu-step.txt" 2>&1; echo "ncu-step rc=$? ($(( $(date +%s) - t0 )) s)"
  T0=$t0 synth_checks "mid q4_k_m 4 1,100,700" "mid iq4_xs 7 1,100"
  wait
  tail -1 "$OUT/prepare.log"
  tar -C /tmp -czf "$REAL_OUT/gemv-int-one.tgz" gemv-int
  env OUT="$REAL_OUT" PHASE=2 MIXES="${MIXES:-q4_k_m}" scripts/gpu/moe-swap.sh
  sed -n '/^last full decode step/,/^in launch order/p' "$OUT/ncu-step.txt"
  exit 0
fi
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
for b in gemm_bench_base gemm_bench; do
  .carry/lab/$b --decode --only-time > "$OUT/decode-$b.txt" 2>&1; echo "$b --decode rc=$? ($(( $(date +%s) - t0 )) s)"
done
.carry/lab/gemm_bench --decode --no-time > "$OUT/decode-check.txt" 2>&1; echo "decode check rc=$? ($(( $(date +%s) - t0 )) s)"
tail -1 "$OUT/decode-check.txt"
.carry/lab/gemm_bench --no-time > "$OUT/lab-check.txt" 2>&1
echo "lab check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -cE '^ *ok' "$OUT/lab-check.txt"; grep -E 'FAIL' "$OUT/lab-check.txt" | head -5
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 60 ncu --kernel-name "gemv4_q4_k" --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy --section LaunchStats \
  .carry/lab/gemm_bench --decode --only-time > "$OUT/ncu-gemv4-q4_k.txt" 2>&1; echo "ncu rc=$?"
T0=$t0 synth_checks "tiny q8_0 1 1,37,100" "mid q4_k_m 4 1,100,700" "mid q8_0 5 1,100" "mid mxfp4_moe 6 1,100" "mid iq4_xs 7 1,100"
TALLY=$TALLY_NOPEER scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1; echo "converter rc=$? ($(( $(date +%s) - t0 )) s)"
wait
tail -2 "$OUT/prepare.log"
grep -E 'Duration|DRAM Throughput|Issued Warp|Registers Per|Achieved Occupancy|Executed Instructions  ' "$OUT/ncu-gemv4-q4_k.txt" | head -8
sed -n '/== converter fixtures on CUDA/,$p' "$OUT/converter.txt"
echo "== decode lab (base | new)"
for b in gemm_bench_base gemm_bench; do echo "-- $b"; grep -E '^  regs (q4_k|q6_k|iq4_xs)' "$OUT/decode-$b.txt" | grep -oE 'regs [a-z0-9_]+ *:|gemv [0-9]+ regs[^;]*' | paste -sd' '; sed -n '/== SUMMARY/,$p' "$OUT/decode-$b.txt" | grep -E ' +(1|8) +[0-9]+ +[0-9]+ \|' | cut -c1-62; done
echo "phase 1: $(( $(date +%s) - t0 )) s"
tar -C /tmp -czf "$REAL_OUT/gemv-int-1.tgz" gemv-int
