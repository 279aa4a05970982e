#!/usr/bin/env bash
# The questions 2026-12-05's GPU calls left open (docs/results/2026-12-05-h200-stop32/), one call:
#  1. speculative decoding with TALLY_ATTN=f32 after an 8,192-token prompt diverged from plain
#     greedy at token 119; the bench now names the margin between the two tokens' logits and
#     says near-tie or bug: run it again and read the verdict;
#  2. the x-resident MoE down tiles' scale-d form (default) against TALLY_WGX_CLEAR=on: digests
#     were equal, the time was lost to the noise gate: pp512/2048/8192 A (clear) / B, ABAB;
#  3. pp32768 with the defaults of 2026-12-05 (f16 attention, gated gate/up, add-norm skip, key
#     splits): twice refused by the gate for a power-capped clock, which since counts as the
#     work's own speed (machine::gpu_busy); and pp32768 with TALLY_ATTN=f32 for the before.
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a, and the
# same with TALLY_WGX_CLEAR=on. Carry .carry/bin, .carry/kcache (or both packed in one
# tar.xz if the tree would pass 64 MiB: unpack into .carry first).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job stop33
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
row synth "$(el)"
TALLY_ATTN=f32 timeout 120 "$T" bench -m $F --backend cuda -p 1 -n 128 -d 8192 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance 0.8 -o json > "$OUT/spec-f32-d8192.json" 2> "$OUT/spec-f32-d8192.err"
row "spec k=3 a=0.8 d8192 attn=f32" "rc=$? $(grep -oE '(near-tie|a bug in)[^:]*' "$OUT/spec-f32-d8192.err" | head -1) ($(el))"
pack
for round in 1 2; do
    for v in A B; do
        e=()
        [ $v = A ] && e=(TALLY_WGX_CLEAR=on)
        env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in f32 default; do
    sleep 20
    e=()
    [ $v = f32 ] && e=(TALLY_ATTN=f32)
    env "${e[@]}" timeout 120 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json \
        > "$OUT/pp32768-$v.json" 2> "$OUT/pp32768-$v.err"
    row "pp32768 attn $v" "rc=$? $(bench_row "$OUT/pp32768-$v.json") $(tail -c 120 "$OUT/pp32768-$v.err") ($(el))"
    pack
done
cat "$OUT/spec-f32-d8192.err" | tail -c 800
printf '%s\n' "${summary[@]}"
