#!/usr/bin/env bash
# Issue 13, 2026-12-05 (stop 34): TALLY_GEMV_MR=on, a fused in-projection launch of 2-4 rows
# (gemv_multi_<t>: qkv, z, beta, alpha; q, k, v; a verification batch, or a 2-4 token prompt or
# tail) with every x row in one block, each weight piece loaded and converted once for all rows,
# instead of a block per row (gemm.cu gemv_int_mr_body; bit for bit gemv_<t>'s sums in the CPU
# emulator, `lab/gemm/emu/emu_test.cpp multirow`, which compiles without fused multiply-adds:
# the logits digests below check the same on the GPU, where NVRTC contracts them). Not yet run
# on a GPU.
# Why (docs/results/2026-12-04-h200-spec-profile/): a 4-token verification's gemv_multi took
# 285 us against 106 at one token (2.7x) on the 4-layer file, with the dense weights' bytes the
# same at either; the earlier try (every projection unfused onto the persistent gemvr4) lost the
# fused launch and was slower (docs/results/2026-12-04-h200-verify/).
# Prediction (written before): these launches of the verification 2.7x -> ~1.4x their one-token
# time (the routed + shared expert launch, also gemv_multi in that profile, is not changed); the
# 40-layer k = 3 verification ~7.0 -> ~6.6 ms; spec k=3 at replayed acceptance 0.8 1.28x ->
# ~1.33x plain greedy. Plain decode unchanged (one-token steps never take the path).
# Runs: first, bit equality on the hardware: `tally run --tokens 3 -n 6` (the 3-token prompt's
# projections take the path) on mid q4_k_m and the 35B file, logits digests A against B; then
# speculative decoding k = 3 and k = 1 at acceptance 0.8, ABAB (A defaults, B
# TALLY_GEMV_MR=on); each bench holds every token to plain greedy decoding's (exit 1 if one
# differs), so B is also the correctness check on the hardware; then tg128 A and B.
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer;
# TALLY_CACHE=.carry/kcache .carry/bin/tally-nopeer kernels --arch sm_90a;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache. Carry .carry/new.tar.xz.
# Since its run (docs/results/2026-12-05-h200-gemv-mr/) the path is the default: A is now
# TALLY_GEMV_MR=off, B the default.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job gemv-mr
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
for f in $MID $F; do
    n=$(basename $f .gguf)
    for v in A B; do
        e=()
        [ $v = A ] && e=(TALLY_GEMV_MR=off)
        env "${e[@]}" timeout 120 "$T" run --model $f --backend cuda --tokens 3 -n 6 -o json \
            > "$OUT/run-$n-$v.json" 2> "$OUT/run-$n-$v.err"
    done
    row "digests $n 3 tokens, B == A" "$(logits_same "$OUT" "$n" A B) ($(el))"
done
for round in 1 2; do
    for v in A B; do
        e=()
        [ $v = A ] && e=(TALLY_GEMV_MR=off)
        for k in 3 1; do
            env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max $k \
                --replay-acceptance 0.8 -o md > "$OUT/spec-k$k-$v-$round.md" 2> "$OUT/spec-k$k-$v-$round.err"
            row "spec k=$k a=0.8 $v round $round" "rc=$? $(grep -ohE '[0-9.]+ t/s vs [0-9.]+ t/s plain greedy in the same windows: [0-9.]+x; per window verify [0-9.]+ s' "$OUT/spec-k$k-$v-$round.md") ($(el))"
        done
    done
    pack
done
for v in A B; do
    e=()
    [ $v = A ] && e=(TALLY_GEMV_MR=off)
    env "${e[@]}" timeout 90 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v.json" 2> "$OUT/tg-$v.err"
    row "tg128 $v" "rc=$? $(bench_row "$OUT/tg-$v.json") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
