#!/usr/bin/env bash
# Two GPU calls on one warm machine (make the second within 30 s of the first returning):
#   PHASE=1: llama.cpp's CUDA build and the 35B-A3B Q4_K_M pool file (scripts/gpu/prepare.sh) in
#            the background, while the checks run: logits digests of a prefill and 6 decode
#            steps equal with and without TALLY_NO_FUSE=1 (every fused launch is bit-identical
#            to its nodes) on mid q4_k_m and a 4-layer 35B-shaped file; `tally check --backend
#            cuda` (poisoned, node by node) on tiny and mid; greedy tokens CPU == CUDA on mid.
#   PHASE=2: side by side with llama.cpp on the 35B file: pp512, pp8192, tg128 and tg128 at depth
#            8192 and 32768 (TALLY_STEP_TRACE=1: tally's step split into device time and the
#            device's wait for the host); the binary before this session's decode work
#            (.carry/bin/tally-base) on tg128 in the same call; speculative decoding with
#            replayed drafts at acceptance 0.9, k = 3.
# Carry .carry/bin and .carry/llama.tar.xz (scripts/gpu/pack.sh --llama; keep the old binary as
# .carry/bin/tally-base). Results come back as $OUT/sbs-PHASE.tgz; a summary is printed last.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
work_dir /tmp/osbs
BIG=${BIG:-/tmp/q4km.gguf}
NEW=$TALLY_NOPEER
BASE=$PWD/.carry/bin/tally-base
V=crates/text/tests/data/tiny.gguf
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
summary=()
row() { summary+=("$(printf '%-46s %s' "$1" "$2")"); }
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"

if [ "${PHASE:-1}" = 1 ]; then
    FILL=pool scripts/gpu/prepare.sh > $OUT/prepare.txt 2>&1 &
    prep=$!
    MID=/tmp/mid-q4_k_m.gguf
    TINY=/tmp/tiny-q4_k_m.gguf
    L4=/tmp/l4.gguf
    "$NEW" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
    "$NEW" synth --preset tiny --quant q4_k_m --seed 3 --out $TINY > /dev/null 2>&1
    "$NEW" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --set n_layers=4 --out $L4 > /dev/null 2>&1
    digest() {
        local f=$1
        shift
        timeout 120 env "$@" "$NEW" run --model "$f" --backend cuda --tokens 37 -n 6 -o json 2> /dev/null |
            python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["logits_digests"]))' 2> /dev/null || echo "ERROR"
    }
    for f in $MID $L4; do
        n=$(basename $f .gguf)
        a=$(digest $f X=1)
        c=$(digest $f TALLY_NO_FUSE=1)
        printf '%s fused %s\n%s unfused %s\n' "$n" "$a" "$n" "$c" >> $OUT/digests.txt
        row "digests fused == unfused, $n" "$([ "$a" = "$c" ] && [ "$a" != ERROR ] && echo same || echo DIFFER)"
    done
    timeout 100 "$NEW" check --model $TINY --backend cuda --tokens 1,37,100 -n 4 > $OUT/check-tiny.txt 2>&1
    row "check tiny q4_k_m (poisoned, node by node)" "$([ $? = 0 ] && echo ok || echo FAILED)"
    timeout 200 "$NEW" check --model $MID --backend cuda --tokens 1,100,700 -n 4 > $OUT/check-mid.txt 2>&1
    row "check mid q4_k_m (poisoned, node by node)" "$([ $? = 0 ] && echo ok || echo FAILED)"
    gen() {
        timeout 120 "$NEW" generate --model $MID --tokenizer $V --backend "$1" --prompt "The quick brown fox jumps over the lazy dog" \
            -n 24 --temp 0 --ignore-eos -o json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2> /dev/null || echo ERROR
    }
    g1=$(gen cpu)
    g2=$(gen cuda)
    printf 'cpu %s\ncuda %s\n' "$g1" "$g2" > $OUT/greedy.txt
    row "greedy tokens cpu == cuda, mid" "$([ "$g1" = "$g2" ] && [ "$g1" != ERROR ] && echo same || echo DIFFER)"
    echo "checks done $(el)"
    wait $prep
    tail -3 $OUT/prepare.txt
else
    TALLY_STEP_TRACE=1 timeout 330 "$TALLY" bench -m $BIG --backend cuda --peer llama.cpp -p 512,8192 -n 128 -d 0,8192,32768 -r 3 \
        -o md --out-dir $OUT/sbs > $OUT/bench-sbs.md 2> $OUT/bench-sbs.err
    row "side by side (rc)" "$? after $(el)"
    row "  tally step trace (all decode rows)" "$(grep -o 'median wall.*' $OUT/bench-sbs.err | tail -1)"
    cp $OUT/sbs/bench.json $OUT/bench-sbs.json 2> /dev/null
    timeout 60 "$BASE" bench -m $BIG --backend cuda -p 512 -n 128 -r 3 -o md --busy-limit 64 --out-dir $OUT/base > $OUT/bench-base.md 2>&1
    row "tg128, binary before (tally-base)" "$(grep -E '\| *tg128' $OUT/bench-base.md | awk -F'|' '{print $(NF-1)}' | head -1)"
    timeout 60 "$NEW" bench -m $BIG --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
        --replay-acceptance 0.9 --out-dir $OUT/spec0.9 -o md > $OUT/spec0.9.md 2>&1
    row "spec acceptance 0.9, k 3 (rc)" "$? $(grep '^speculative' $OUT/spec0.9.md | head -1)"
    rm -rf $OUT/sbs $OUT/base $OUT/spec0.9
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt 2>&1
fi
echo "== summary phase ${PHASE:-1} ($(el))"
tar czf $REAL_OUT/sbs-${PHASE:-1}.tgz -C /tmp osbs
[ "${PHASE:-1}" = 2 ] && grep -E '^\|' $OUT/bench-sbs.md
printf '%s\n' "${summary[@]}"
