#!/usr/bin/env bash
# GPU call: decode, the binary before (.carry/bin/tally-base) against the one after
# (.carry/bin/tally-nopeer) in one call, on the 35B-A3B Q4_K_M synth file (pool fill) and the small
# synth files (docs/results/2026-12-02-h200-decode-host/, calls 1 and 2). What it compared there:
# the host-side changes of a852186 and the launch changes of f6c9b8f against 7b27262's binary.
#   1. (LAB=1) lab/gemm --decode built with GEMV_PF=1 and GEMV_PF=2: the GEMV correctness matrix
#      on the GPU (PF=2) and the decode shapes timed back to back, both (GEMV_PF was a lab
#      switch of the 2026-12-02 session, since removed: both builds are the same kernel now);
#   2. logits digests (prefill + 6 decode steps): new == new unfused (TALLY_NO_FUSE=1) on mid
#      q4_k_m and a 4-layer 35B-shaped file, and whether base == new (equal unless a kernel's
#      summation order changed, e.g. the output head moving from mmv to gemv4);
#      `tally check --backend cuda` (poisoned, node by node) on tiny and mid; greedy tokens of
#      `tally generate` CPU == CUDA on mid;
#   3. TALLY_STEP_TRACE=1 tally bench tg128 on the 35B file, base and new alternated, twice each:
#      tok/s and the step's wall / device / host-wait split;
#   4. ncu, one decode step of the 4-layer file (new binary): the per-kernel table.
# HERE first: build .carry/bin/tally-nopeer (the new binary); keep the old one as tally-base.
# Everything under /tmp/oab comes back as $OUT/ab.tgz; a summary table is printed last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
work_dir /tmp/oab
NEW=$PWD/.carry/bin/tally-nopeer
BASE=$PWD/.carry/bin/tally-base
V=crates/text/tests/data/tiny.gguf
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-46s %s' "$1" "$2")"); }
el() { echo "$(($(date +%s) - t0)) s"; }

F=/tmp/m35.gguf
L4=/tmp/l4.gguf
MID=/tmp/mid-q4_k_m.gguf
if [ "${LAB:-0}" = 1 ]; then
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DGEMV_PF=1 -I crates/engine/src/cuda/kernels \
        lab/gemm/bench.cu -o /tmp/gemm_pf1 > $OUT/nvcc1.log 2>&1 &
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DGEMV_PF=2 -I crates/engine/src/cuda/kernels \
        lab/gemm/bench.cu -o /tmp/gemm_pf2 > $OUT/nvcc2.log 2>&1 &
fi
"$NEW" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F -o json > $OUT/synth35.json 2>&1
"$NEW" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --set n_layers=4 --out $L4 > /dev/null 2>&1
"$NEW" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
echo "synth done $(el)"
wait
echo "nvcc done $(el)"

# 1. Lab.
if [ "${LAB:-0}" = 1 ]; then
    timeout 240 /tmp/gemm_pf2 --decode > $OUT/lab-pf2.log 2>&1
    row "lab PF=2 gemv correctness + decode (rc)" "$?"
    timeout 120 /tmp/gemm_pf1 --decode --only-time > $OUT/lab-pf1.log 2>&1
    row "lab PF=1 decode timing (rc)" "$?"
    echo "lab done $(el)"
fi

# 2. Digests and the node-by-node check.
digest() {
    local bin=$1 f=$2
    shift 2
    timeout 120 env "$@" "$bin" run --model "$f" --backend cuda --tokens 37 -n 6 -o json 2> /dev/null |
        python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["logits_digests"]))' 2> /dev/null || echo "ERROR"
}
for f in $MID $L4; do
    n=$(basename $f .gguf)
    a=$(digest "$BASE" $f X=1)
    b=$(digest "$NEW" $f X=1)
    c=$(digest "$NEW" $f TALLY_NO_FUSE=1)
    printf '%s base %s\n%s new %s\n%s new-unfused %s\n' "$n" "$a" "$n" "$b" "$n" "$c" >> $OUT/digests.txt
    row "digests new == new unfused, $n" "$([ "$b" = "$c" ] && [ "$b" != ERROR ] && echo same || echo DIFFER)"
    row "  digests base == new, $n" "$([ "$a" = "$b" ] && echo same || echo differ)"
done
TINY=/tmp/tiny-q4_k_m.gguf
"$NEW" synth --preset tiny --quant q4_k_m --seed 3 --out $TINY > /dev/null 2>&1
timeout 100 "$NEW" check --model $TINY --backend cuda --tokens 1,37,100 -n 4 > $OUT/check-tiny.txt 2>&1
row "check tiny q4_k_m (poisoned, node by node)" "$([ $? = 0 ] && echo ok || echo FAILED)"
timeout 150 "$NEW" check --model $MID --backend cuda --tokens 1,100,700 -n 4 > $OUT/check-mid.txt 2>&1
row "check mid q4_k_m (poisoned, node by node)" "$([ $? = 0 ] && echo ok || echo FAILED)"
gen() { timeout 120 "$NEW" generate --model $MID --tokenizer $V --backend "$1" --prompt "The quick brown fox jumps over the lazy dog" -n 24 --temp 0 --ignore-eos -o json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2> /dev/null || echo ERROR; }
g1=$(gen cpu)
g2=$(gen cuda)
echo "cpu $g1" > $OUT/greedy.txt
echo "cuda $g2" >> $OUT/greedy.txt
row "greedy tokens cpu == cuda, mid" "$([ "$g1" = "$g2" ] && [ "$g1" != ERROR ] && echo same || echo DIFFER)"
echo "checks done $(el)"

# 3. Decode side by side, base and new alternated.
for rep in 1 2; do
    for which in base new; do
        bin=$([ $which = base ] && echo "$BASE" || echo "$NEW")
        TALLY_STEP_TRACE=1 timeout 200 "$bin" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o md --busy-limit 64 \
            --out-dir $OUT/b-$which-$rep > $OUT/bench-$which-$rep.md 2> $OUT/bench-$which-$rep.err
        row "35B tg128 $which #$rep" "$(grep -E '\| *tg128' $OUT/bench-$which-$rep.md | awk -F'|' '{print $(NF-1)}' | head -1)"
        row "  step trace $which #$rep" "$(grep -o 'median wall.*' $OUT/bench-$which-$rep.err | tail -1)"
    done
done
echo "bench done $(el)"

# 4. ncu of one decode step, the 4-layer file, new binary.
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2> /dev/null | tail -1)"
timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file $OUT/ncu-d0-none.csv \
    "$NEW" generate --model $L4 --tokenizer $V --backend cuda --prompt "The quick brown fox jumps over the lazy dog" \
    -n 4 --temp 0 --ignore-eos > $OUT/ncu.out 2>&1
python3 tools/gpu/ncu_step.py $OUT/ncu-d0-none.csv > $OUT/step-d0-none.txt 2>&1
row "ncu l4 decode step (new)" "$(grep '^last full' $OUT/step-d0-none.txt)"

echo "== summary ($(el))"
rm -rf $OUT/b-*
tar czf $REAL_OUT/ab.tgz -C /tmp oab
[ "${LAB:-0}" = 1 ] && grep -A40 "SUMMARY" $OUT/lab-pf2.log | head -45
sed -n 7,32p $OUT/step-d0-none.txt
printf '%s\n' "${summary[@]}"
