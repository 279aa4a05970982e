#!/usr/bin/env bash
# Runs the libFuzzer target fuzz/fuzz_targets/model_file.rs (GGUF reading, config validation,
# plan building) for SECONDS (default 60) on a scratch copy of the committed seeds; exits
# non-zero if libFuzzer finds a crash, a leak, a timeout or an input over the memory limit (the
# input is kept under fuzz/artifacts/model_file/).
#
# The toolchain is stable Rust: cargo-fuzz passes nightly-only -Z flags (sanitizer, coverage),
# which RUSTC_BOOTSTRAP=1 lets stable rustc accept. cargo-fuzz is installed once, pinned, into
# ~/.cargo/bin (about 5 minutes on 2 cores; skipped when that exact version is there).
# Usage: scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
version=0.13.2
bin="$HOME/.cargo/bin/cargo-fuzz"
if ! { [[ -x "$bin" ]] && [[ "$("$bin" --version 2>/dev/null)" == "cargo-fuzz $version" ]]; }; then
  cargo install cargo-fuzz --version "$version" --locked
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build --fuzz-dir fuzz model_file
# cargo-fuzz builds into fuzz/target, or into $CARGO_TARGET_DIR when that is set.
target=${CARGO_TARGET_DIR:-fuzz/target}/x86_64-unknown-linux-gnu/release/model_file
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp fuzz/seeds/model_file/* "$corpus"/
mkdir -p fuzz/artifacts/model_file
"$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
  -artifact_prefix=fuzz/artifacts/model_file/ "$@" "$corpus"
echo "fuzz: model_file ran ${seconds} s without a crash"
