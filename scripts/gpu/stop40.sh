#!/usr/bin/env bash
# 2026-12-06, stop 40, one device call (issue 10 item 5's per-byte clause): the codebook
# formats' GEMV front end (Codebook::word_il: IQ4_NL / IQ4_XS / MXFP4 bytes in their nibble
# order, x stored in the same order by gemv_quantize_x; MXFP4 by two sign-replicating byte
# permutes instead of three) against the base (HEAD before it). Two versions in the lab: v1
# (the tables as immediates: ptxas moved them into a register at every use, 26 moves in
# gemv_mxfp4's loop of 270 instructions) and new (the four table words loaded once per kernel
# from global memory, il_table(): 3 moves, 245 instructions; the engine binary is new's).
# SASS of the loops (nvcc 13.0 -arch=sm_90a, instructions per 32-weight piece): gemv q4_k 109,
# mxfp4 135 (v1) / 122.5 (new), iq4_xs 135 / 123.5, iq4_nl 153.5 / 139; per byte still ~19%
# above Q4_K's (mxfp4/iq4_nl also pay ~17 selects a piece for their 17/18-byte blocks).
# HERE first (no device time on builds): `git worktree add /tmp/base40 <base>`; both lab
# binaries (nvcc -O3 ... lab/gemm/bench.cu -> .carry/lab/gemm_bench{,_v1,_base}); both tally
# binaries without the peer (`cargo build --release -p tally`: .carry/bin/tally-nopeer,
# .carry/bin/tally-base-nopeer); tally_peer_llama's quantize example (.carry/bin/quantize) with
# llama.cpp's CPU libraries from the llama-cpp-sys-2 build (.carry/llama-cpu); then
# tar cJf .carry/s40a.tar.xz -C .carry bin/tally-nopeer bin/tally-base-nopeer bin/quantize
# llama-cpu lab. No kernel cache: both binaries' kernels compile on the device beside the lab.
# The side by side with llama.cpp is stop40b.sh (its CUDA libraries were still building here).
#   (1) lab decode, new: every GEMV/MMV check against float64 on the hardware (prmt's
#       sign-replicate mode is what the emulator assumes), then the decode shapes' GB/s per type;
#       base: timings only. Per byte read against Q4_K on the same shapes is the criterion.
#   (2) llama.cpp-quantised tiny files (iq4_xs, iq4_nl, mxfp4_moe): `tally check --backend
#       cuda` at 1, 7, 37 and 1,000 tokens, 8 decode steps, node by node against the CPU.
#   (3) 35B-A3B MXFP4_MOE and IQ4_XS: tg128 and pp512, base / new / base / new, tally alone.
# Prediction (written before): lab new vs base, MXFP4 gemv4 8192 x 2048 +20-30% GB/s, MoE
# gate/up +15-25%, reaching Q4_K's GB/s per byte or within 5%; IQ4_XS/IQ4_NL +10-15%, still
# 5-15% under Q4_K per byte; v1 between base and new; every check passes. Engine tg128: MXFP4_MOE +4-7%, IQ4_XS +2-4%; pp512 unchanged (the
# prefill tiles do not use this path).
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s40a.tar.xz -C .carry
export TALLY="$PWD/.carry/bin/tally-nopeer" TALLY_NOPEER="$PWD/.carry/bin/tally-nopeer"
. scripts/gpu/env.sh
gpu_job stop40
T=$TALLY
B=$PWD/.carry/bin/tally-base-nopeer
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 60 ] 2> /dev/null && D=/dev/shm
row "files in" "$D ($(df -h --output=avail $D | tail -1 | tr -d ' ') free)"

# Both binaries' kernels (NVRTC, one cache keyed by source) and the two 35B files, made while the
# lab and the checks run.
( "$T" kernels --arch sm_90a > "$OUT/kernels-new.log" 2>&1; "$B" kernels --arch sm_90a > "$OUT/kernels-base.log" 2>&1 ) &
kern=$!
( for mix in mxfp4_moe iq4_xs; do
      "$T" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $D/mix-$mix.gguf -o json \
          > "$OUT/synth-$mix.json" 2>&1
  done ) &
synth=$!

# (1)
timeout 150 .carry/lab/gemm_bench --decode > "$OUT/lab-new.log" 2>&1
row "lab new (checks + times)" "rc=$? $(grep -E 'cases, .* failed' "$OUT/lab-new.log" | tr -s ' ') ($(el))"
timeout 100 .carry/lab/gemm_bench_base --decode --only-time > "$OUT/lab-base.log" 2>&1
row "lab base (times)" "rc=$? ($(el))"
timeout 100 .carry/lab/gemm_bench_v1 --decode --only-time > "$OUT/lab-v1.log" 2>&1
row "lab v1 (times)" "rc=$? ($(el))"
pack

# (2)
wait $kern
row kernels "new rc: $(tail -1 "$OUT/kernels-new.log" | cut -c1-60); base: $(tail -1 "$OUT/kernels-base.log" | cut -c1-60) ($(el))"
mkdir -p /tmp/llamaq
src=/tmp/llamaq-src-bf16.gguf
"$T" synth --preset tiny --quant bf16 --seed 5 --out $src > /dev/null 2>&1
for mix in iq4_xs iq4_nl mxfp4_moe; do
    f=/tmp/llamaq/tiny-$mix.gguf
    LD_LIBRARY_PATH="$PWD/.carry/llama-cpu:$LD_LIBRARY_PATH" .carry/bin/quantize $src $f $mix > "$OUT/quantize_$mix.log" 2>&1 || { row "llamaq $mix" "quantize FAILED"; continue; }
    timeout 120 "$T" check --model $f --backend cuda --tokens 1,7,37,1000 -n 8 > "$OUT/check_llamaq_$mix.log" 2>&1
    rc=$?
    row "llamaq $mix check" "rc=$rc, $(grep -cE '\| ok \|$' "$OUT/check_llamaq_$mix.log") rows ok; $(grep -E '^\| prefill 1000' "$OUT/check_llamaq_$mix.log" | cut -d'|' -f2,3 | tr -s ' ') ($(el))"
done
pack
wait $synth
row synth "$(ls -la $D/mix-*.gguf | awk '{print $5}' | tr '\n' ' ') ($(el))"

# (3)
for mix in mxfp4_moe iq4_xs; do
    f=$D/mix-$mix.gguf
    for v in base new base new; do
        bin=$T; [ $v = base ] && bin=$B
        timeout 100 "$bin" bench -m $f --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/ab-$mix-$v-$(date +%s).json" 2> "$OUT/ab-$mix-$v.err"
        row "ab $mix $v" "rc=$? $(bench_row "$(ls -t "$OUT"/ab-$mix-$v-*.json | head -1)") ($(el))"
    done
    pack
done

pack
grep -E '^(decode|dec |output)' "$OUT/lab-new.log" | tail -40 | cut -c1-110
printf '%s\n' "${summary[@]}"
