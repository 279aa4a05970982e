#!/usr/bin/env bash
# Issue 14, 2026-12-05: the two prefill changes expert-f16-lab.sh pointed at, in the engine
# (both opt-in until this script has run: no device could be had after the lab call):
#  - TALLY_X32G=on: the Q4_K MoE down projections of short prompts (up to 32 rows per expert)
#    on the x-resident 32-row tile x32g (lab, 512 tokens: 0.158 against m32's 0.203 ms);
#  - TALLY_EXPERT_F16=on: the Q6_K downs read an f16 copy of the experts decoded once (lab:
#    0.305 / 0.342 / 0.900 ms against Q6_K's 0.375 / 0.428 / 1.246 at 512 / 2,048 / 8,192
#    tokens), ~10 GB more device memory for the 35B Q4_K_M file.
# Prediction (written before): pp512 +2.5% (x32g) +3.5% (f16), pp2048 +2% (f16), pp8192 +2.8%
# (f16); tally's device peak at pp32768 +10.2 GB with the copies.
# Checks (`tally check --backend cuda`, node by node against the CPU, poisoned) with both on:
# mid q4_k_m at 64 tokens (8 rows per expert: x32g, f16 x64), 200 (25: the same) and 1,000
# (125: Q4_K x128, f16 x128); then tally alone, the 35B-A3B Q4_K_M synth file, pp512, pp2048,
# pp8192 (-r 3) ABC twice: A = defaults, B = TALLY_X32G=on, C = B + TALLY_EXPERT_F16=on; then
# pp32768 A and C (the device peak of tally's allocations is in the JSON); last, speculative
# decoding with TALLY_ATTN=f32 after 8,192 tokens (stop33.sh's item 1).
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer;
# TALLY_CACHE=.carry/kcache .carry/bin/tally-nopeer kernels --arch sm_90a;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer kcache (the tree's 64 MiB carry limit).
# Carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job expert-f16
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
for n in 64 200 1000; do
    TALLY_EXPERT_F16=on TALLY_X32G=on timeout 200 "$T" check --model $MID --backend cuda --tokens $n -n 3 > "$OUT/check-mid-$n.log" 2>&1
    row "check mid $n x32g+expert_f16" "rc=$? $(grep -E '^\| prefill' "$OUT/check-mid-$n.log" | tr -s ' ' | cut -c1-100) ($(el))"
done
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
pack
for round in 1 2; do
    for v in A B C; do
        e=()
        [ $v = B ] && e=(TALLY_X32G=on)
        [ $v = C ] && e=(TALLY_X32G=on TALLY_EXPERT_F16=on)
        env "${e[@]}" timeout 90 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in A C; do
    e=()
    [ $v = C ] && e=(TALLY_X32G=on TALLY_EXPERT_F16=on)
    env "${e[@]}" timeout 100 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json \
        > "$OUT/pp32768-$v.json" 2> "$OUT/pp32768-$v.err"
    row "pp32768 $v" "rc=$? $(bench_row "$OUT/pp32768-$v.json") $(grep -o '"tally_device_memory_peak_bytes[^,]*' "$OUT/pp32768-$v.json" | head -1) ($(el))"
    pack
done
# Left open by 2026-12-05's stop 32 (scripts/gpu/stop33.sh item 1): speculative decoding with
# TALLY_ATTN=f32 after 8,192 tokens diverged from plain greedy; the bench now says near-tie or bug.
TALLY_ATTN=f32 timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -d 8192 -r 3 --spec mtp --draft-max 3 \
    --replay-acceptance 0.8 -o json > "$OUT/spec-f32-d8192.json" 2> "$OUT/spec-f32-d8192.err"
row "spec k=3 a=0.8 d8192 attn=f32" "rc=$? $(bench_row "$OUT/spec-f32-d8192.json") $(grep -oE '(near-tie|a bug)[^.]*' "$OUT/spec-f32-d8192.err" | head -1 | cut -c1-120) ($(el))"
pack
printf '%s\n' "${summary[@]}"
