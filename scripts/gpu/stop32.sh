#!/usr/bin/env bash
# Issues 13 and 14, 2026-12-05: the side by side with llama.cpp after gated.sh and stop31.sh, tally
# with the opt-ins those two calls passed, given as WIN (e.g. WIN="TALLY_GATED=on
# TALLY_ADD_NORM=skip TALLY_ATTN=f16 TALLY_F32_GEMM=tf32 TALLY_ATTN_SPLIT=on"), the defaults
# they become once committed.
#  1. llama.cpp's CUDA libraries: a build started in the session's first call in the background
#     (LLAMA_SRC=/tmp/llama.cpp LLAMA_BUILD_DIR=/tmp/llama-cuda, setsid: it outlives that call
#     while the machine stays warm) is waited for; built here when absent;
#  2. `tally bench --peer llama.cpp` on the 35B-A3B Q4_K_M synth file: pp512, pp2048, pp8192,
#     tg128, interleaved in one process;
#  3. tally alone with WIN, default alongside: pp32768 (device peak), and speculative k=3 at
#     replayed acceptance 0.8 (depth 0 and 8192).
# HERE first: scripts/gpu/pack.sh --llama; `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`.
# Carry .carry/bin, .carry/kcache, .carry/llama.tar.xz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job stop32
F=/tmp/q4km.gguf
read -r -a W <<< "${WIN:-}"
row "WIN" "${WIN:-(none)}"
[ -f $F ] || "$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
LB=/tmp/llama-cuda
if [ ! -f $LB/bin/libggml-cuda.so ] && ! pgrep -f llama-build.sh > /dev/null; then
    [ -f /tmp/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C /tmp
    LLAMA_SRC=/tmp/llama.cpp LLAMA_BUILD_DIR=$LB LLAMA_BENCH=0 JOBS=16 scripts/gpu/llama-build.sh > "$OUT/llama-build.log" 2>&1
fi
while pgrep -f llama-build.sh > /dev/null; do sleep 2; done
row "llama.cpp libraries" "$(ls $LB/bin/libllama.so $LB/bin/libggml-cuda.so 2>&1 | wc -l) of 2 ($(el))"
export LD_LIBRARY_PATH="$LB/bin:$LD_LIBRARY_PATH"
# BASE: the switches stop31.sh timed (WIN adds the untimed ones): base/win interleaved, twice.
read -r -a B <<< "${BASE:-}"
for round in 1 2; do
    for v in base win; do
        e=("${B[@]}")
        [ $v = win ] && e=("${W[@]}")
        env "${e[@]}" timeout 60 "$TALLY_NOPEER" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
done
for v in base win; do
    e=("${B[@]}")
    [ $v = win ] && e=("${W[@]}")
    env "${e[@]}" timeout 60 "$TALLY_NOPEER" bench -m $F --backend cuda -p 1 -n 128 -r 3 -o json > "$OUT/tg-$v.json" 2> "$OUT/tg-$v.err"
    row "tg128 $v" "rc=$? $(bench_row "$OUT/tg-$v.json") ($(el))"
done
pack
env "${W[@]}" timeout 330 "$TALLY" bench -m $F --backend cuda --peer llama.cpp -p 512,2048,8192 -n 128 -r 3 \
    --out-dir "$OUT/sbs" > "$OUT/bench-sbs.md" 2>&1
row "side by side" "rc=$? ($(el))"
pack
for v in default win; do
    e=()
    [ $v = win ] && e=("${W[@]}")
    env "${e[@]}" timeout 60 "$TALLY_NOPEER" bench -m $F --backend cuda -p 32768 -n 0 -r 2 -o json \
        > "$OUT/pp32768-$v.json" 2> "$OUT/pp32768-$v.err"
    row "pp32768 $v" "rc=$? $(bench_row "$OUT/pp32768-$v.json") ($(el))"
    env "${e[@]}" timeout 120 "$TALLY_NOPEER" bench -m $F --backend cuda -p 1 -n 128 -d 0,8192 -r 3 --spec mtp \
        --draft-max 3 --replay-acceptance 0.8 -o json > "$OUT/spec-$v.json" 2> "$OUT/spec-$v.err"
    row "spec k=3 a=0.8 $v" "rc=$? $(bench_row "$OUT/spec-$v.json") ($(el))"
    pack
done
grep -E '^\| ' "$OUT/bench-sbs.md" | tail -8
printf '%s\n' "${summary[@]}"
