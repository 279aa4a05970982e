#!/usr/bin/env bash
# RAN 2026-12-06 on an H100 (no H200 came) as `SBS_P=512,8192,32768 SBS_D=0,8192 MIXES=mxfp4_moe
# bash scripts/gpu/stop39a.sh` (349 s of device time were left): 198 s; then q8_0 inline on the
# same warm machine: `tar xJf .carry/s39b.tar.xz -C .carry; TALLY=.carry/bin/tally . env.sh;
# LD_LIBRARY_PATH=.carry/llama-lib:...; synth q8_0 into /dev/shm; bench --peer llama.cpp -p
# 512,8192 -n 128 -r 3`. Results: docs/results/2026-12-06-stop39/.
# HERE first: the dynamic-link tally and quantize example (scripts/gpu/pack.sh --llama; `cargo
# build --release -p tally-peer-llama --features dynamic-link --example quantize`), stripped, in
# .carry/bin; scripts/gpu/llama-build-local.sh (.carry/llama-lib); `tally kernels --arch sm_90a`
# into .carry/kcache; tar cJf .carry/s39b.tar.xz -C .carry bin/tally bin/quantize llama-lib kcache.
# 2026-12-06, stop 39, call 1: side by side with llama.cpp, whose CUDA libraries were built
# HERE (no device time: CUDA 13.0's nvcc and cuBLAS from PyPI wheels, a stub libcuda.so.1 to
# link against, scripts/gpu/llama-build.sh's flags, sm_90) and travel in .carry/s39b.tar.xz
# with tally (the dynamic-link peer), tally_peer_llama's quantize example and the kernel cache:
#   (1) llama.cpp-quantised files through CUDA (issue 10; scripts/gpu/llama-quantized.sh's
#       check, the files made on the device by llama.cpp's quantiser from the tiny bf16 synth
#       source into ten mixes), `tally check --backend cuda` at 1, 7, 37, 1,000 tokens each;
#   (2) with EXTRA=1: `tally check` mid q4_k_m at 1,000 tokens (the CUDA kernels are stop 37's:
#       it passed then);
#   (3) side by side, 35B-A3B Q4_K_M pool file: pp512/2048/8192/32768 and tg128 at depth 0,
#       8,192 and 32,768 (issues 13 and 14; bench.json holds tally's device peak);
#   (4) every other mix side by side (pp512, pp8192, tg128; issue 10 item 5) while time is left:
#       mxfp4_moe and q8_0 first (slower than llama.cpp at pp512 on 2026-12-02);
#   (5) with EXTRA=1: speculative decoding (replayed drafts, k = 3) and pp131072.
# Only ~16 minutes of device time were left after failed starts, hence one call for all.
# The mixes not measured on 2026-12-06: ONLY_MIXES=1 MIXES="iq4_xs q5_k_m" (one call).
# Prediction (written before): all ten llama.cpp files and mid pass; on an H100 stop 37's
# numbers (pp512 13.1k, pp8192 35.5k, pp32768 29k, tg128 316); on an H200 ~1.05x at pp and
# ~1.04x at tg. llama.cpp as in stop 32 (H200: pp512 5.6k, pp8192 5.5k, tg128 237): tally ~2.4x,
# ~6.5x, ~1.35x. Spec a=0.8 k=3 ~1.33x. Mixes (2026-12-02, H200: tally slower at pp512 on q8_0,
# 0.69x, and mxfp4_moe, 0.95x; since then q4_k_m's pp512 went 7.9k -> ~13k on tiles every type
# shares): tally faster at pp512, pp8192 and tg128 on every mix, q8_0 pp512 ~1.2x.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s39b.tar.xz -C .carry
export TALLY="$PWD/.carry/bin/tally" TALLY_NOPEER="$PWD/.carry/bin/tally"
. scripts/gpu/env.sh
export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:$LD_LIBRARY_PATH"
gpu_job stop39a
T=$TALLY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
# The 35B file in RAM when /dev/shm has room (the device's disk wrote 0.28-0.9 GB/s in earlier
# calls: 74 s for this file on stop 35's H100), else on disk.
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
row "files in" "$D ($(df -h --output=avail $D | tail -1 | tr -d ' ') free)"
F=$D/q4km.gguf
# ONLY_MIXES=1: straight to (4), e.g. ONLY_MIXES=1 MIXES="iq4_xs q5_k_m".
if [ "${ONLY_MIXES:-0}" = 0 ]; then
    ("$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1) &
    synth=$!

    # (1) llama.cpp's quantiser, then CUDA against the CPU on each file.
    mkdir -p /tmp/llamaq
    src=/tmp/llamaq-src-bf16.gguf
    "$T" synth --preset tiny --quant bf16 --seed 5 --out $src > /dev/null 2>&1
    for mix in q4_k_m q5_k_m q6_k q8_0 iq4_xs iq4_nl mxfp4_moe q4_0 q3_k_m q2_k; do
        f=/tmp/llamaq/tiny-$mix.gguf
        .carry/bin/quantize $src $f $mix > "$OUT/quantize_$mix.log" 2>&1 || { row "llamaq $mix" "quantize FAILED"; continue; }
        "$T" info --model $f > "$OUT/info_$mix.txt" 2>&1 || { row "llamaq $mix" "info FAILED"; continue; }
        timeout 120 "$T" check --model $f --backend cuda --tokens 1,7,37,1000 -n 8 > "$OUT/check_llamaq_$mix.log" 2>&1
        rc=$?
        row "llamaq $mix check" "rc=$rc, $(grep -cE '\| ok \|$' "$OUT/check_llamaq_$mix.log") rows ok; $(grep -E '^\| prefill 1000' "$OUT/check_llamaq_$mix.log" | cut -d'|' -f2,3 | tr -s ' ') ($(el))"
    done
    pack
    if [ "${EXTRA:-0}" = 1 ]; then
        MID=/tmp/mid-q4_k_m.gguf
        "$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
        timeout 120 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
        row "check mid 1000" "rc=$? $(grep 'worst node' "$OUT/check-mid-1000.log" | tail -1 | cut -c1-110) ($(el))"
        pack
    fi
    wait $synth
    row synth "$(stat -c %s $F) bytes ($(el))"

    # (3) side by side.
    # SBS_P / SBS_D: fewer tests when less device time is left.
    timeout 300 "$T" bench -m $F --backend cuda --peer llama.cpp -p "${SBS_P:-512,2048,8192,32768}" -n 128 -d "${SBS_D:-0,8192,32768}" -r 3 \
        --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
    row "sbs q4_k_m" "rc=$? ($(el))"
    pack
fi
rm -f $F
# (4) every mix side by side at pp512, pp8192 and tg128 while time is left (issue 10 item 5).
for mix in ${MIXES:-mxfp4_moe q8_0 iq4_xs q5_k_m}; do
    [ "$(( $(date +%s) - t0 ))" -lt 420 ] || { row "$mix" "skipped (time)"; continue; }
    f=$D/mix-$mix.gguf
    "$T" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $f -o json > "$OUT/synth-$mix.json" 2>&1
    row "$mix synth" "rc=$? $(stat -c %s $f) bytes ($(el))"
    timeout 150 "$T" bench -m $f --backend cuda --peer llama.cpp -p 512,8192 -n 128 -r 3 \
        --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2> "$OUT/bench-$mix.err"
    row "$mix bench" "rc=$? ($(el))"
    rm -f $f
    pack
done
# (5) with EXTRA=1: speculative decoding (replayed drafts, k = 3) and pp131072.
if [ "${EXTRA:-0}" = 1 ]; then
    "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > /dev/null 2>&1
    for a in 0.8 0.9 0.5; do
        timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance $a \
            --out-dir "$OUT/spec-$a" > "$OUT/spec-$a.md" 2> "$OUT/spec-$a.err"
        row "spec k=3 a=$a" "rc=$? ($(el))"
        pack
    done
    timeout 80 "$T" bench -m $F --backend cuda -p 131072 -n 0 -r 3 --out-dir "$OUT/p131072" > "$OUT/p131072.md" 2> "$OUT/p131072.err"
    row "pp131072" "rc=$? ($(el))"
fi
pack
grep -E '^\|' "$OUT/sbs.md" "$OUT"/bench-*.md "$OUT"/spec-*.md "$OUT/p131072.md" 2> /dev/null | cut -d'|' -f1,7- | cut -c1-150
printf '%s\n' "${summary[@]}"
