#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call8; the code it ran is call8/conv-l2norm-fusion.patch, not merged: no measurable gain).
# 2026-12-05, stop 37, call 8: a prompt's conv + SiLU and its q and k L2 norms as one launch
# (conv_silu_l2norm, ops/fused.rs; issue 14: norm_rows_w was 13.2 ms of pp8192, the q/k pair ~3
# of it, one read and one write of q and k per linear-attention layer). Its sums of squares are
# formed in norm_rows' order, so it should be bit for bit the unfused launches: the CPU emulator
# says so (lab/delta/emu_test.cpp, against norm_rows and norm_rows_w; a mutant with another
# addition order differs in 1,975 values). (1) lab/delta: the fused conv's checks (float64, 1e-5).
# (2) logits digests defaults == TALLY_NO_FUSE=1 (every fusion off: all bit-identical by design)
# on mid q4_k_m at 1,000 tokens and on the 35B shapes with 4 layers at 600 tokens; tally check
# mid 1000. (3) pp512/2048/8192 base (308b97f) / new x2, pp32768 -r 3 each.
# Prediction (written before): digests equal; pp8192 +1.1%, pp512 +0.5%, pp32768 +1%.
# HERE first: nvcc lab/delta/bench.cu -> .carry/lab/delta_new; cargo build --release ->
# .carry/bin/tally-new; .carry/bin/tally-nopeer = 308b97f's build; kernels into .carry/kcache;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer bin/tally-new kcache lab/delta_new.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37h
B=$TALLY_NOPEER
N=$PWD/.carry/bin/tally-new
F=/tmp/q4km.gguf
[ -f $F ] || "$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
timeout 150 .carry/lab/delta_new --no-time > "$OUT/lab-delta-new.txt" 2>&1
row "lab delta new (checks)" "rc=$? $(grep -E 'SUMMARY' "$OUT/lab-delta-new.txt") ($(el))"
grep -E "FAIL|FATAL|l2norm" "$OUT/lab-delta-new.txt" | head -8 > "$OUT/lab-l2.txt"
pack
mid_l4_files
for f in $MID $L4; do
    n=$(basename $f .gguf)
    tok=1000; [ $f = $L4 ] && tok=600
    for v in A U; do
        e=(TALLY_UNUSED=1); [ $v = U ] && e=(TALLY_NO_FUSE=1)
        env "${e[@]}" timeout 90 "$N" run --model $f --backend cuda --tokens $tok -n 6 -o json > "$OUT/run-$n-$v.json" 2> "$OUT/run-$n-$v.err"
    done
    row "digests $n $tok fused == unfused" "$(logits_same "$OUT" $n A U) ($(el))"
done
timeout 90 "$N" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (new)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in B N; do
        bin=$B; [ $v = N ] && bin=$N
        timeout 120 "$bin" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in B N; do
    bin=$B; [ $v = N ] && bin=$N
    timeout 120 "$bin" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json > "$OUT/pp32k-$v.json" 2> "$OUT/pp32k-$v.err"
    row "pp32768 $v" "rc=$? $(bench_row "$OUT/pp32k-$v.json") ($(el))"
done
pack
cat "$OUT/lab-l2.txt"
printf '%s\n' "${summary[@]}"
