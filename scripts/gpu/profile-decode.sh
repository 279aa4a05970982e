#!/usr/bin/env bash
# Where a decode step's time goes (issue 13), before any decode kernel changes: per-kernel device
# time from ncu for a few decode steps, and the wall time of a step with and without the captured
# graph. Model: the 35B-A3B shapes at Q4_K_M with 4 layers (3 linear-attention + 1 full; every
# per-layer kernel is the real model's, and the output head too), ~2 GB, written in under a minute.
#   HERE first: scripts/gpu/pack.sh     GPU host: scripts/gpu/profile-decode.sh   (carry .carry/bin)
# Writes $OUT/profile.tar.gz (raw ncu CSVs, bench tables); prints the per-kernel table of one step.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
T="$TALLY_NOPEER"
M=${M:-/tmp/l4.gguf}
mkdir -p "$OUT/p"
t0=$(date +%s)
# The 4-layer file and one decode step's per-kernel table ($OUT/p/step-d0.txt, ncu-d0.csv.gz).
M="$M" scripts/gpu/ncu-step.sh > "$OUT/p/ncu-step.out" 2>&1
echo "ncu d0 rc=$? $(( $(date +%s) - t0 )) s"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
# Depth: a prompt of ~4,000 tokens (the synth vocabulary splits words into several tokens).
long=$(python3 -c 'import random; random.seed(1); print(" ".join(random.choice(["alpha","beta","gamma","delta","river","stone","cloud","seven"]) for _ in range(2500)))')
ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/p/ncu-d4k.csv" \
  "$T" generate --model "$M" --tokenizer crates/text/tests/data/tiny.gguf --backend cuda --prompt "$long" -n 3 --temp 0 --ignore-eos > "$OUT/p/ncu-d4k.out" 2>&1
echo "ncu d4k rc=$? $(( $(date +%s) - t0 )) s"
"$T" bench -m "$M" -p 512 -n 128 -r 3 --backend cuda -o md --busy-limit 64 --out-dir "$OUT/p/b1" > "$OUT/p/bench-graph.md" 2>&1
TALLY_NO_GRAPH=decode "$T" bench -m "$M" -p 512 -n 128 -r 3 --backend cuda -o md --busy-limit 64 --out-dir "$OUT/p/b2" > "$OUT/p/bench-nograph.md" 2>&1
"$T" bench -m "$M" -p 512 -n 64 -d 8192,32768 -r 3 --backend cuda -o md --busy-limit 64 --out-dir "$OUT/p/b3" > "$OUT/p/bench-depth.md" 2>&1
echo "bench: $(( $(date +%s) - t0 )) s"
python3 tools/gpu/ncu_step.py "$OUT/p/ncu-d4k.csv" > "$OUT/p/step-d4k.txt" 2>&1
tar -C "$OUT" -czf "$OUT/profile.tar.gz" p && rm -rf "$OUT/p/b1" "$OUT/p/b2" "$OUT/p/b3"
cat "$OUT/p/step-d4k.txt" | tail -25
for f in graph nograph depth; do echo "== $f"; grep -E "^\|" "$OUT/p/bench-$f.md" | tail -4; done
cat "$OUT/p/step-d0.txt" | tail -60
