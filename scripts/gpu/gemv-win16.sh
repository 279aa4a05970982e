#!/usr/bin/env bash
# The GEMV front end of the 32-element formats by whole 16-byte loads (Win16::issue, PieceSmall)
# and IQ4_XS by three 8-byte loads (issue 10 item 5: decode per byte read against Q4_K). One call.
#   The lab's check matrix of the new build; `gemm_bench --decode --only-time` of the base and the
#   new build; the decode correctness cases; tally check CUDA vs CPU (tiny q8_0, mid iq4_xs,
#   mid mxfp4_moe, mid q4_k_m); `tally bench` (no peer) tg128 and pp512 on the 35B iq4_xs and
#   mxfp4_moe pool files, to set against the side-by-side run of scripts/gpu/codebook.sh.
# HERE first: .carry/lab/gemm_bench_base (the previous build), .carry/lab/gemm_bench (this tree),
# scripts/gpu/pack.sh. Carry .carry/bin and .carry/lab.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/gemv-win16
t0=$(date +%s)
.carry/lab/gemm_bench --no-time > "$OUT/lab-check.txt" 2>&1
echo "lab check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -cE '^ *ok' "$OUT/lab-check.txt"; grep -E 'FAIL' "$OUT/lab-check.txt" | head -5
.carry/lab/gemm_bench --decode --no-time > "$OUT/decode-check.txt" 2>&1; echo "decode check rc=$? ($(( $(date +%s) - t0 )) s)"
tail -2 "$OUT/decode-check.txt"
for b in gemm_bench_base gemm_bench; do
  .carry/lab/$b --decode --only-time > "$OUT/decode-$b.txt" 2>&1; echo "$b --decode rc=$? ($(( $(date +%s) - t0 )) s)"
done
T0=$t0 synth_checks "tiny q8_0 1 1,37,100" "mid iq4_xs 7 1,100" "mid mxfp4_moe 6 1,100" "mid q4_k_m 4 1,100"
for mix in iq4_xs mxfp4_moe; do
  f=/tmp/mix-$mix.gguf
  "$TALLY_NOPEER" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $f > /dev/null 2>&1 || { echo "synth $mix failed"; continue; }
  timeout 150 "$TALLY_NOPEER" bench -m $f --backend cuda -p 512 -n 128 -r 3 > "$OUT/bench-$mix.md" 2>&1
  echo "$mix bench rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E '^\| tally' "$OUT/bench-$mix.md"
  rm -f $f
done
echo "== decode lab (base | new)"
for b in gemm_bench_base gemm_bench; do echo "-- $b"; sed -n '/== SUMMARY/,$p' "$OUT/decode-$b.txt" | grep -E 'iq4_xs|mxfp4|q4_k ' | grep -E ' 1 | 8 ' | cut -c1-80; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -C /tmp -czf "$REAL_OUT/gemv-win16.tgz" gemv-win16
