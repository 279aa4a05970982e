#!/usr/bin/env bash
# The main job on the embedded default: build tally (with the llama.cpp peer, CPU), write a tiny
# synthetic qwen35moe model, show its plan and dead work, then measure tally and llama.cpp on the
# same file the same way (graph, standalone timing, in-graph replay, noise gate) and print the
# ledger. Outputs go to target/demo/ (ledger-pp128.{md,json,svg} and both measurements).
#
# Defaults for a quiet 2-core machine (README "The demo" says why):
# - one thread per engine (DEMO_THREADS): with two threads on two cores, every replayed category
#   pays a thread-pool wake-up and cache refill after its barrier (~0.3 ms each, 14 categories:
#   +14% on the sum of increments, validation (b)), and any background process collides with a
#   worker, so the noise gate discards window after window; one thread leaves a core free;
# - 128 prompt tokens (DEMO_TOKENS): per-node work grows with the prompt, that fixed cost does
#   not; 5 clean windows per group (DEMO_REPEATS; the gate keeps 6, as many of each run order);
# - up to 100 re-measured windows per group (DEMO_RETRIES): these VMs switch between speed levels
#   ~30% apart every second or so, and a switch inside a window makes one run an outlier; with the
#   default budget of 6, one of the 16 groups ran out in most runs, at 20 one group still did in
#   one of two runs with the 5% floor below (stop 29), and at 40 two groups did in one of six
#   (stop 30: the host at 0.86-1.03 of its typical speed for the whole run); a retry costs one
#   window (about 1 s), so a noisy host makes the run longer, not untrusted; 100 (the most
#   `--max-retries` takes) since 2026-12-07: on stop 50's and 51's machines (levels 0.77-1.80 of
#   typical, every discard an outlier, none a busy core) three runs at 80 each had one or two
#   groups a side run out after 246-320 discards in 15-18 min, and refused a verdict;
# - an outlier floor of 5% (DEMO_OUTLIER_FLOOR, `--outlier-floor`): single runs on these VMs
#   scatter by 2-3% even when the host is steady (levels 0.98-1.08 of typical), and with the
#   ledger's default 2% floor a window of 6-8 series almost always held one such run: the gate
#   discarded 160 windows a side and gave up (2026-12-04, stop 29). Spikes of 10-30% are still
#   discarded; the replay validations (a)-(d) are unchanged;
# - each sample the fastest of 3 back-to-back runs (DEMO_BEST_OF, `--best-of`): single runs on
#   these VMs can jump between ~52 and ~85 ms from one run to the next (no steal time shows in
#   /proc/stat), and the first run of an engine's block in a window is ~0.6 ms slower (the other
#   engine ran before it): the fastest of three drops both. 2026-12-05, build present: 4 of 5
#   runs trusted at 3 (2 min 3 s - 2 min 17 s, 6-9 discards a side), 1 of 2 at 1 (26-31
#   discards); docs/results/2026-12-05-cpu-replay-method/. An earlier single run at 3, on a host
#   slow throughout, had not helped (docs/results/2026-12-02-cpu-demo/).
# Exit code: 0 trusted ledger; 3 measured but "no verdict" (a validation failed or the noise gate
# ran out of retries: the WARNINGS say which); 1/2 as every tally command.
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${DEMO_TOKENS:-128}
threads=${DEMO_THREADS:-1}
repeats=${DEMO_REPEATS:-5}
retries=${DEMO_RETRIES:-100}
best_of=${DEMO_BEST_OF:-3}
outlier_floor=${DEMO_OUTLIER_FLOOR:-0.05}
scripts/setup.sh
cargo build --release -p tally --features llama
T=target/release/tally
mkdir -p target/demo
$T synth --preset tiny --quant q4_k_m --seed 1 --out target/demo/tiny.gguf
$T graph --model target/demo/tiny.gguf -p "$tokens"
$T ledger --model target/demo/tiny.gguf --peer llama.cpp -p "$tokens" -t "$threads" \
  -r "$repeats" --max-retries "$retries" \
  --best-of "$best_of" --outlier-floor "$outlier_floor" --out-dir target/demo
