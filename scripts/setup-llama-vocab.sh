#!/usr/bin/env bash
# Fetches llama.cpp's vocab-only GGUFs for Qwen3.5 and Qwen2 (ggml-vocab-qwen35.gguf,
# ggml-vocab-qwen2.gguf, each with the .inp/.out expected ids of llama.cpp's tokenizer test) into
# a cache folder, idempotent. They come from the llama-cpp-python sdist on PyPI (pinned), which
# vendors llama.cpp's models/ folder; the files are several MB, so the repository does not hold
# them. Prints the export line the tokenizer tests read: eval "$(scripts/setup-llama-vocab.sh)".
set -euo pipefail
VERSION=0.3.36
DIR=${TALLY_LLAMA_VOCAB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally/llama-vocab}
files=(ggml-vocab-qwen35.gguf ggml-vocab-qwen2.gguf)
have=1
for f in "${files[@]}"; do
  for ext in "" .inp .out; do [ -s "$DIR/$f$ext" ] || have=0; done
done
if [ "$have" = 1 ]; then
  echo "llama.cpp vocab files already in $DIR" >&2
else
  mkdir -p "$DIR"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # The sdist itself, not a build of it (its build dependencies come as wheels).
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -d "$tmp" >&2
  members=()
  for f in "${files[@]}"; do
    for ext in "" .inp .out; do
      members+=("llama_cpp_python-$VERSION/vendor/llama.cpp/models/$f$ext")
    done
  done
  tar -xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp" "${members[@]}"
  for m in "${members[@]}"; do mv "$tmp/$m" "$DIR/"; done
  echo "llama.cpp vocab files written to $DIR" >&2
fi
echo "export TALLY_LLAMA_VOCAB_DIR=$DIR"
