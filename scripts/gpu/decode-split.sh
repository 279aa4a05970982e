#!/usr/bin/env bash
# One GPU call: flash decoding's key splits per multiprocessor (TALLY_DEC_SPLIT = 1, 2, 4, 8) on
# the 35B-A3B Q4_K_M pool file, tally alone: tg128 at depth 0, 8192 and 32768, one bench per
# value in one call; `tally check --backend cuda` on mid q4_k_m with the largest value.
# Carry .carry/bin. Results: $OUT/split.tgz; the table is printed last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/osplit
T=$TALLY_NOPEER
F=/tmp/m35.gguf
MID=/tmp/mid-q4_k_m.gguf
t0=$(date +%s)
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > /dev/null 2>&1
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
echo "synth $(($(date +%s) - t0)) s"
TALLY_DEC_SPLIT=8 timeout 150 "$T" check --model $MID --backend cuda --tokens 1,100,700 -n 4 > $OUT/check-mid-split8.txt 2>&1
echo "check mid, TALLY_DEC_SPLIT=8: $([ $? = 0 ] && echo ok || echo FAILED)"
for s in 1 4 2 8; do
    TALLY_DEC_SPLIT=$s timeout 100 "$T" bench -m $F --backend cuda -p 512 -n 128 -d 0,8192,32768 -r 3 -o md \
        --busy-limit 64 --out-dir $OUT/b$s > $OUT/bench-split$s.md 2>&1
    echo "split $s rc=$? $(($(date +%s) - t0)) s"
done
rm -rf $OUT/b?
tar czf $REAL_OUT/split.tgz -C /tmp osplit
for s in 1 2 4 8; do echo "== TALLY_DEC_SPLIT=$s"; grep -E '\| *tg128' $OUT/bench-split$s.md; done
