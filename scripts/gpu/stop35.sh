#!/usr/bin/env bash
# 2026-12-05, stop 35, call 1: scripts/gpu/expert-f16.sh's decision run (issue 14's two prefill
# opt-ins, TALLY_X32G and TALLY_EXPERT_F16; its header has the prediction, written before),
# then what the next change needs: ncu's per-kernel device time of a 512- and an 8,192-token
# prefill with the defaults and with both opt-ins (the last profile, ../2026-12-04-h200-wgx/,
# predates the gated tile, f16 attention and the norm changes), and the converter-made fixtures
# on CUDA with the multi-row verification GEMV (default since a6726c3; scripts/gpu/converter.sh).
# Stages pack as they go (a cut call still brings the summary back).
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer;
# TALLY_CACHE=.carry/kcache .carry/bin/tally-nopeer kernels --arch sm_90a;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache. Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop35
env_of() {
    case $1 in
        B) echo TALLY_X32G=on ;;
        C) echo TALLY_X32G=on TALLY_EXPERT_F16=on ;;
        D) echo TALLY_PREFETCH_AHEAD=on ;;
        E) echo TALLY_X32G=on TALLY_EXPERT_F16=on TALLY_PREFETCH_AHEAD=on ;;
        R) echo TALLY_CAST_REUSE=off ;;
        F) echo TALLY_PDL=all ;;
        *) echo TALLY_UNUSED=1 ;;
    esac
}
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
for n in 64 1000; do
    TALLY_EXPERT_F16=on TALLY_X32G=on TALLY_PREFETCH_AHEAD=on timeout 150 "$T" check --model $MID --backend cuda --tokens $n -n 3 > "$OUT/check-mid-$n.log" 2>&1
    row "check mid $n x32g+expert_f16+prefetch_ahead" "rc=$? $(grep -E 'worst node' "$OUT/check-mid-$n.log" | head -1 | cut -c1-90) ($(el))"
done
# The cast reuse (default since this binary) against TALLY_CAST_REUSE=off: the same bits.
for v in A R; do
    env $(env_of $v) timeout 60 "$T" run --model $MID --backend cuda --tokens 300 -n 6 -o json \
        > "$OUT/run-mid300-$v.json" 2> "$OUT/run-mid300-$v.err"
done
row "digests mid 300 tokens, cast reuse == off" "$(logits_same "$OUT" mid300 A R) ($(el))"
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
pack
# D: TALLY_PREFETCH_AHEAD=on (the prompt's tensor-core tiles prefetch their whole weight slice
# at the block's start). Prediction (written before): the 512-token expert tiles from ~1 TB/s
# toward 2 TB/s: pp512 +10-20%, pp8192 +0-5% (its tiles are nearer the MMA bound).
for round in 1 2; do
    for v in A B C D E R F; do
        env $(env_of $v) timeout 90 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
# TALLY_PREFETCH_AHEAD=on (the persistent GEMV prefetches its next row group into L2; the head
# reads 417 MB at ~2.5 TB/s). Prediction (written before): the head 0.17 -> ~0.12 ms a token,
# tg128 +1.5%; spec k = 3 (the verification's dense projections on gemvr4 too) +1-2%.
for round in 1 2; do
    for v in A P; do
        e=(TALLY_UNUSED=1)
        [ $v = P ] && e=(TALLY_PREFETCH_AHEAD=on)
        env "${e[@]}" timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json \
            > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg128 $v round $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
        env "${e[@]}" timeout 60 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 \
            --replay-acceptance 0.8 -o md > "$OUT/spec-$v-$round.md" 2> "$OUT/spec-$v-$round.err"
        row "spec k=3 a=0.8 $v round $round" "rc=$? $(grep -ohE '[0-9.]+ t/s vs [0-9.]+ t/s plain greedy in the same windows: [0-9.]+x; per window verify [0-9.]+ s' "$OUT/spec-$v-$round.md") ($(el))"
    done
done
pack
for vn in A:512 A:8192 E:512; do
    v=${vn%:*} n=${vn#*:}
    (
        export $(env_of $v)
        ncu_prefill $F $n
        mv "$OUT/kernels-pp$n.txt" "$OUT/kernels-pp$n-$v.txt"
        mv "$OUT/ncu-pp$n.csv.gz" "$OUT/ncu-pp$n-$v.csv.gz"
        row "ncu pp$n $v" "$(head -1 "$OUT/kernels-pp$n-$v.txt") ($(el))"
    )
    pack
done
for v in A C; do
    env $(env_of $v) timeout 60 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 2 -o json \
        > "$OUT/pp32768-$v.json" 2> "$OUT/pp32768-$v.err"
    row "pp32768 $v" "rc=$? $(bench_row "$OUT/pp32768-$v.json") $(grep -o '"tally_device_memory_peak_bytes[^,]*' "$OUT/pp32768-$v.json" | head -1) ($(el))"
    pack
done
mkdir -p "$OUT/conv"
OUT="$OUT/conv" TALLY=$T timeout 120 scripts/gpu/converter.sh > "$OUT/converter.txt" 2>&1
row "converter fixtures on CUDA" "rc=$? $(grep -c ': ok\| ok (expected' "$OUT/converter.txt") ok rows ($(el))"
pack
TALLY_ATTN=f32 timeout 100 "$T" bench -m $F --backend cuda -p 1 -n 128 -d 8192 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance 0.8 -o json > "$OUT/spec-f32-d8192.json" 2> "$OUT/spec-f32-d8192.err"
row "spec k=3 a=0.8 d8192 attn=f32" "rc=$? $(bench_row "$OUT/spec-f32-d8192.json") $(grep -oE '(near-tie|a bug)[^.]*' "$OUT/spec-f32-d8192.err" | head -1 | cut -c1-120) ($(el))"
pack
printf '%s\n' "${summary[@]}"
