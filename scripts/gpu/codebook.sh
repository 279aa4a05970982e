#!/usr/bin/env bash
# Codebook lookup with three byte permutes per four 4-bit indices (Codebook<T> in
# quant_small.cuh: IQ4_NL, IQ4_XS, MXFP4) and the lab's per-type decode shapes (issue 10 item 5:
# per byte read against Q4_K, prefill and decode). Two calls on one warm machine.
#   PHASE=1: prepare.sh (llama.cpp build + the 35B Q4_K_M pool file) in the background; the lab's
#            check matrix of the new build; `gemm_bench --moe` and `--decode --only-time` of the
#            base and the new build; ncu of gemm_iq4_xs_s32 (new); tally check CUDA vs CPU
#            (tiny q8_0, mid q4_k_m/q8_0/mxfp4_moe/iq4_xs); the converter-made fixtures on CUDA.
#   PHASE=2 (within 30 s of phase 1): scripts/gpu/moe-swap.sh PHASE=2 (side-by-side bench per mix).
# HERE first: .carry/lab/gemm_bench_base (base tree with this lab/gemm/bench.cu) and
# .carry/lab/gemm_bench (see lab/gemm/README.md), scripts/gpu/pack.sh --llama.
# Carry .carry/bin, .carry/lab, .carry/llama.cpp (or .carry/llama.tar.xz).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
if [ "${PHASE:-1}" = 2 ]; then exec env PHASE=2 scripts/gpu/moe-swap.sh; fi
work_dir /tmp/codebook
t0=$(date +%s)
FILL=pool scripts/gpu/prepare.sh > "$OUT/prepare.log" 2>&1 &
.carry/lab/gemm_bench --no-time > "$OUT/lab-check.txt" 2>&1
echo "lab check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -cE '^ *ok' "$OUT/lab-check.txt"; grep -E 'FAIL' "$OUT/lab-check.txt" | head -5
for b in gemm_bench_base gemm_bench; do
  .carry/lab/$b --moe > "$OUT/moe-$b.txt" 2>&1; echo "$b --moe rc=$? ($(( $(date +%s) - t0 )) s)"
  .carry/lab/$b --decode --only-time > "$OUT/decode-$b.txt" 2>&1; echo "$b --decode rc=$? ($(( $(date +%s) - t0 )) s)"
done
.carry/lab/gemm_bench --decode --no-time > "$OUT/decode-check.txt" 2>&1; echo "decode check rc=$? ($(( $(date +%s) - t0 )) s)"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 60 ncu --kernel-name "gemm_iq4_xs_s32" --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
  .carry/lab/gemm_bench --moe --only iq4_xs > "$OUT/ncu-iq4_xs-s32.txt" 2>&1; echo "ncu rc=$?"
echo "lab done ($(( $(date +%s) - t0 )) s)"
T0=$t0 synth_checks "tiny q8_0 1 1,37,100" "mid q4_k_m 4 1,100,700" "mid q8_0 5 1,100" "mid mxfp4_moe 6 1,100" "mid iq4_xs 7 1,100"
TALLY=$TALLY_NOPEER scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1; echo "converter rc=$? ($(( $(date +%s) - t0 )) s)"
wait
tail -2 "$OUT/prepare.log"
echo "== moe lab (base | new)"
for b in gemm_bench_base gemm_bench; do echo "-- $b"; sed -n '/== SUMMARY/,$p' "$OUT/moe-$b.txt" | grep -E 'q8_0|q6_k|mxfp4|q4_k|iq4' | cut -c1-120; done
echo "== decode lab (base | new)"
for b in gemm_bench_base gemm_bench; do echo "-- $b"; sed -n '/== SUMMARY/,$p' "$OUT/decode-$b.txt" | grep -E ' +1 ' | cut -c1-80; done
sed -n '/== converter fixtures on CUDA/,$p' "$OUT/converter.txt"
echo "phase 1: $(( $(date +%s) - t0 )) s"
tar -C /tmp -czf "$REAL_OUT/codebook-1.tgz" codebook
