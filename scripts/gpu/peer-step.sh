#!/usr/bin/env bash
# One GPU call on a fresh machine: is the peer's one-token step (after a restored context)
# llama.cpp's steady decode step? Builds llama.cpp's CUDA libraries (with llama-bench), writes a
# 4-layer 35B-shaped Q4_K_M file, runs the decode-step ledger at d512 on it (tally vs the peer)
# and llama-bench tg128 on the same file, and prints both llama.cpp step times last.
# Carry: .carry/bin and .carry/llama.tar.xz (scripts/gpu/pack.sh --llama).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -f .carry/llama.cpp/CMakeLists.txt ] || tar xJf .carry/llama.tar.xz -C .carry
work_dir /tmp/ps
F=/tmp/l4.gguf
t0=$(date +%s)
( "$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool \
    --out "$F" > "$OUT/synth.txt" 2>&1 ) &
[ -f target/llama-cuda/bin/libllama.so ] || ( JOBS=14 scripts/gpu/llama-build.sh > "$OUT/llama_build.log" 2>&1 ) &
wait
echo "prepare: $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH="$PWD/target/llama-cuda/bin:$LD_LIBRARY_PATH"
LB=target/llama-cuda/bin/llama-bench
timeout 60 "$LB" -m "$F" -ngl 99 -fa 1 -p 0 -n 128 -r 5 -o md > "$OUT/llama-bench.md" 2>"$OUT/llama-bench.err"
echo "llama-bench rc=$?"
left=$(( ${BUDGET_S:-420} - ($(date +%s) - t0) ))
timeout "$left" "$TALLY" ledger --model "$F" --backend cuda --peer llama.cpp --step-at 512 -r 5 \
  --busy-limit 64 --out-dir "$OUT/d512" > "$OUT/ledger-d512.txt" 2>&1; echo "ledger rc=$?"
tar czf "$REAL_OUT/peer-step.tgz" -C /tmp ps
grep -E "^Verdict|coverage|replay:" "$OUT/ledger-d512.txt" | cut -c1-400
cat "$OUT/llama-bench.md"
