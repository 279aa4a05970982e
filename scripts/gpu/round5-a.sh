#!/usr/bin/env bash
# GPU call 1 of 2 (2026-12-02), after the decode latency changes (greedy argmax over many blocks,
# the split-parallel attention combine, MoE GEMV without routing tables at one row per tile,
# short-N GEMVs over more multiprocessors, 1024-thread norms and shared gate for single rows).
#   1. prepare.sh in the background (llama.cpp's CUDA build + the 35B Q4_K_M synth file).
#   2. Meanwhile, correctness: the lab checks of attention (the combine) and GEMM/GEMV (built
#      here: .carry/bin/attn_bench, .carry/bin/gemm_bench); `tally check --backend cuda`
#      (poisoned) on tiny q4_k_m, tiny-odd bf16, mid q4_k_m and mid q8_0; greedy generation with
#      --verify-sampler (the CPU sampler on the downloaded logits every step: 0 mismatches) and
#      CPU == CUDA tokens.
#   3. Fused launches (gate/up/SwiGlu, add + norm) change no bit: logits digests with and
#      without TALLY_NO_FUSE=1 on five files (tiny, tiny-odd, mid q4_k_m / q8_0, the 4-layer
#      35B-shaped file).
#   4. The per-kernel decode profile again (scripts/gpu/profile-decode.sh's model and ncu runs),
#      with ncu's cache flush (as before the change) and without it.
# Everything under /tmp/o comes back as $OUT/r5a.tgz. Call 2 (round5-b.sh) within 30 s.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
# The llama.cpp sources travel compressed (the carry limit): .carry/llama.tar.xz, made here with
# `tar cJf .carry/llama.tar.xz -C .carry llama.cpp`.
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
REAL_OUT=$OUT
export OUT=/tmp/o; mkdir -p $OUT
T=$TALLY_NOPEER
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
# The call's limit is 600 s: later steps are skipped past 470 s so the results still come back.
left() { [ $(( $(date +%s) - t0 )) -lt 470 ] || { row "skipped (time)" "$1"; return 1; }; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,utilization.gpu --format=csv > "$OUT/gpu.txt"
( scripts/gpu/prepare.sh > "$OUT/prepare.txt" 2>&1 ) &
prep=$!
timeout 120 .carry/bin/attn_bench --checks-only > "$OUT/lab-attn.txt" 2>&1; rc=$?
row "lab attention checks" "rc=$rc $(grep -ci fail "$OUT/lab-attn.txt") FAIL lines"
timeout 200 .carry/bin/gemm_bench --no-time > "$OUT/lab-gemm.txt" 2>&1; rc=$?
row "lab gemm checks" "rc=$rc $(grep -c FAIL "$OUT/lab-gemm.txt") FAIL lines"
for spec in "tiny q4_k_m 3 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,700" "mid q8_0 5 1,300"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout 150 "$T" check --model "$f" --backend cuda --tokens "$4" -n 4 > "$OUT/check-$1-$2.txt" 2>&1; rc=$?
  row "check $1 $2 (poisoned)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done
V=crates/text/tests/data/tiny.gguf
for m in tiny-q4_k_m mid-q4_k_m; do
  for be in cpu cuda; do
    timeout 120 "$T" generate --model /tmp/$m.gguf --tokenizer $V --backend $be --prompt "The quick brown fox" \
      --temp 0 -n 48 --ignore-eos -o json > "$OUT/gen-$m-$be.json" 2> "$OUT/gen-$m-$be.err"
  done
  timeout 120 "$T" generate --model /tmp/$m.gguf --tokenizer $V --backend cuda --prompt "The quick brown fox" \
    --temp 0 -n 48 --ignore-eos --verify-sampler -o json > "$OUT/gen-$m-verify.json" 2> "$OUT/gen-$m-verify.err"
  row "greedy $m cpu == cuda; sampler mismatches" "$(python3 - "$OUT" "$m" <<'PY'
import json, sys
o, m = sys.argv[1:]
try:
    a, b, v = (json.load(open(f"{o}/gen-{m}-{s}.json")) for s in ("cpu", "cuda", "verify"))
    print(("same" if a["tokens"] == b["tokens"] else "DIFFER"), v.get("sampler_mismatches"))
except Exception as e:
    print("ERROR", e)
PY
)"
done
M=/tmp/l4.gguf
left "l4 synth" && "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --out "$M" > /dev/null 2>&1
# Fused launches change no bit: the logits digests of a prefill and 6 decode steps, with and
# without TALLY_NO_FUSE, on CUDA.
for f in /tmp/tiny-q4_k_m.gguf /tmp/mid-q4_k_m.gguf /tmp/mid-q8_0.gguf /tmp/tiny-odd-bf16.gguf "$M"; do
  n=$(basename "$f" .gguf)
  left "digests $n" || continue
  timeout 120 "$T" run --model "$f" --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-$n-fused.json" 2> "$OUT/run-$n-fused.err"
  TALLY_NO_FUSE=1 timeout 120 "$T" run --model "$f" --backend cuda --tokens 37 -n 6 -o json > "$OUT/run-$n-unfused.json" 2> "$OUT/run-$n-unfused.err"
  row "fused == unfused logits bits, $n" "$(python3 - "$OUT" "$n" <<'PY'
import json, sys
o, n = sys.argv[1:]
try:
    a, b = (json.load(open(f"{o}/run-{n}-{s}.json"))["logits_digests"] for s in ("fused", "unfused"))
    print("same (7 steps)" if a == b and len(a) == 7 else f"DIFFER at {[i for i, (x, y) in enumerate(zip(a, b)) if x != y]}")
except Exception as e:
    print("ERROR", e)
PY
)"
done
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
gen=("$T" generate --model "$M" --tokenizer $V --backend cuda --prompt "The quick brown fox jumps over the lazy dog" -n 4 --temp 0 --ignore-eos)
for cc in all none; do
  left "ncu d0 $cc" || continue
  ncu --clock-control none --cache-control $cc --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-d0-$cc.csv" "${gen[@]}" > "$OUT/ncu-d0-$cc.out" 2>&1
  python3 tools/gpu/ncu_step.py "$OUT/ncu-d0-$cc.csv" > "$OUT/step-d0-$cc.txt" 2>&1
  row "ncu l4 decode step, cache $cc" "$(grep '^last full' "$OUT/step-d0-$cc.txt")"
done
left "ncu d8k" && {
long=$(python3 -c 'import random; random.seed(1); print(" ".join(random.choice(["alpha","beta","gamma","delta","river","stone","cloud","seven"]) for _ in range(1500)))')
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-d8k-none.csv" \
  "$T" generate --model "$M" --tokenizer $V --backend cuda -c 16384 --prompt "$long" -n 3 --temp 0 --ignore-eos > "$OUT/ncu-d8k.out" 2>&1
python3 tools/gpu/ncu_step.py "$OUT/ncu-d8k-none.csv" > "$OUT/step-d8k-none.txt" 2>&1
row "ncu l4 decode step at d7.7k, cache none" "$(grep '^last full' "$OUT/step-d8k-none.txt")"
}
# prepare.sh takes ~440-465 s; give it until 575 s, then send back what there is.
while kill -0 $prep 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 575 ]; do sleep 2; done
kill -0 $prep 2>/dev/null && row "prepare" "STILL RUNNING at 575 s (round5-b.sh completes it)"
tail -3 "$OUT/prepare.txt"
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
head -32 "$OUT/step-d0-none.txt"
tar czf "$REAL_OUT/r5a.tgz" -C /tmp o
