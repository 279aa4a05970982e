#!/usr/bin/env bash
# Issue 14, "before": where prefill's time goes on the current binary, 35B-A3B Q4_K_M synth file
# (pool fill, with the MTP block, which prefill does not run): per-kernel device time under ncu
# (clock control none, kernels serialised) of one pp512 and one pp8192 prefill; tally bench at
# pp512/pp8192/pp32768 with the default kernels and with TALLY_GEMM=cublas (the decoded-f16 dense
# projections), with tally's device peak; then `tally measure -p 512` (graph, standalone,
# replay) when time is left.
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin and .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job pf
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1
row synth "$(el)"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for p in 512 8192; do
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-pp$p.csv" \
    "$T" run --model $F --backend cuda --tokens $p -n 0 > "$OUT/ncu-pp$p.out" 2>&1
  python3 tools/gpu/ncu_kernels.py "$OUT/ncu-pp$p.csv" > "$OUT/kernels-pp$p.txt" 2>&1
  row "ncu pp$p" "$(head -1 "$OUT/kernels-pp$p.txt") ($(el))"
  gzip -f "$OUT/ncu-pp$p.csv"
done
for v in default cublas; do
  env $( [ $v = cublas ] && echo TALLY_GEMM=cublas ) timeout 200 "$T" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o md \
    > "$OUT/bench-$v.md" 2> "$OUT/bench-$v.err"
  row "bench $v" "rc=$? $(grep -E 'pp(512|8192|32768) ' "$OUT/bench-$v.md" | awk -F'|' '{printf "%s=%s ", $8, $9}') ($(el))"
  grep -E 'peak' "$OUT/bench-$v.md" >> "$OUT/summary.txt"
done
tar -C /tmp -czf "$REAL_OUT/pf.tgz" pf
timeout 240 "$T" measure --model $F --backend cuda -p 512 -r 3 --out-dir "$OUT/m512" -o md > "$OUT/measure-512.md" 2> "$OUT/measure-512.err"
row "measure pp512" "rc=$? ($(el))"
tar -C /tmp -czf "$REAL_OUT/pf.tgz" pf
printf '%s\n' "${summary[@]}"
