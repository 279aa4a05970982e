#!/usr/bin/env bash
# 2026-12-07, stop 51: the side by side with llama.cpp (issues 13 and 14) on whatever GPU comes.
# Carry .carry/s51.tar.xz (bin/tally with the dynamic-link llama.cpp peer, llama-lib: llama.cpp's
# CUDA libraries from scripts/gpu/llama-build-local.sh) right after stop51a.sh's call (its kcache).
# nvidia-smi samples clocks and power every 100 ms (clocks.txt per stage).
#   1. 35B-A3B Q4_K_M (synth, pool fill, seed 1): pp512, pp8192, pp32768, tg128, both engines;
#   2. decode at depth (llama-bench -d style): tg64 after 8,192 (a pp512 first: bench needs one) and 32,768 tokens, both engines.
# Predictions: on an H100, stop 50's prefill (pp512 ~15.1k, pp8192 ~40.5k, pp32768 ~34.6k)
# and tg128 stop 51a's gemvi + mmvi figure; on an H200 +0-5% prefill, decode +10-20% (4.8 vs
# 3.35 TB/s where the GEMVs read DRAM); llama.cpp pp512 ~5.6k, tg128 ~235 (H100).
# The ncu sections at the end: the new decode GEMVs (gemvi_multi, mmvi_multi) for the next work.
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
# The kernel cache comes from the call before on the same warm machine (the tarball and the tree
# together fill the carry limit): without it the first run would compile gemm.cu here for minutes.
[ -d .carry/kcache ] || { echo "stop51b: no .carry/kcache on this machine (cold start): not running"; exit 3; }
ab_start s51b s51
smi_start
stage synth
synth_35b q4_k_m
stage sbs
timeout 260 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs" "rc=$? ($(el))"
pack
stage depth
left=$(( LIMIT - $(date +%s) + t0 - 10 ))
if [ "$left" -gt 60 ]; then
    timeout "$left" "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512 -n 64 -d 8192,32768 -r 3 \
        -o md --out-dir "$OUT/depth" > "$OUT/depth.md" 2> "$OUT/depth.err"
    row "bench depth" "rc=$? ($(el))"
fi
smi_stop
pack
# ncu sections (occupancy, launch, warp states, memory) of the decode kernels stop 50's A/B
# touched: the in-projection and gate/up GEMVs (gemv_multi_q4_k) and conv_silu, 4-layer file,
# one decode step's launches (after the prefill's), for the next decode work.
stage ncu
left=$(( LIMIT - $(date +%s) + t0 - 10 ))
if [ "$left" -gt 60 ]; then
    mid_l4_files
    command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
    timeout "$left" ncu --clock-control none --cache-control none -k regex:'gemvi_multi_q4_k|mmvi_multi_q4_k|gemvi_q4_k|gemv_f32' \
        --launch-skip 30 --launch-count 8 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis "$N" generate --model "$L4" \
        --tokenizer crates/text/tests/data/tiny.gguf --backend cuda --prompt "The quick brown fox" -n 3 \
        --temp 0 --ignore-eos > "$OUT/ncu-sections.txt" 2>&1
    row "ncu sections" "rc=$? ($(el))"
    pack
fi
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
head -30 "$OUT/sbs.md"
head -20 "$OUT/depth.md"
