#!/usr/bin/env bash
# 2026-12-05, stop 35: NOT YET RUN (the session's device time ran out): the final code's cuBLAS
# paths on the GPU after the review mend (8258c38): `tally check` on mid q4_k_m at 1,000 tokens
# (the cast reuse and the f32 router on cuBLAS both run there), then logits digests of a
# 300-token prefill and 6 steps with the defaults against TALLY_CAST_REUSE=off TALLY_F32_GEMM=simt
# (expected to differ only where the router's sums do: near-ties), and the defaults twice (the
# same bits run to run).
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop35c
T=$TALLY_NOPEER
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 40 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (defaults)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-110) ($(el))"
pack
for v in A A2 R; do
    e=(TALLY_UNUSED=1)
    [ $v = R ] && e=(TALLY_CAST_REUSE=off TALLY_F32_GEMM=simt)
    env "${e[@]}" timeout 20 "$T" run --model $MID --backend cuda --tokens 300 -n 6 -o json \
        > "$OUT/run-mid300-$v.json" 2> "$OUT/run-mid300-$v.err"
done
row "digests mid 300, defaults twice" "$(logits_same "$OUT" mid300 A A2) ($(el))"
row "digests mid 300, defaults vs reuse off + simt" "$(logits_same "$OUT" mid300 A R) ($(el))"
pack
printf '%s\n' "${summary[@]}"
