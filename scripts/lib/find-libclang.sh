#!/usr/bin/env bash
# Prints the path of a libclang shared library that bindgen (through clang-sys, runtime loading)
# would load, and exits 0; exits 1 and prints nothing when there is none.
#
# It tests the files clang-sys itself opens: `libclang.so`, `libclang-*.so`, `libclang.so.*`,
# `libclang-*.so.*`, skipping `libclang-cpp*` (the C++ interface, which bindgen cannot use), in
# $LIBCLANG_PATH and then the directories clang-sys searches on Linux. A file must be a regular
# ELF file (a dangling link does not count).
#
# Usage: scripts/lib/find-libclang.sh [--root DIR]   (DIR prefixes every system path: for tests)
set -euo pipefail
root=""
if [ "${1:-}" = "--root" ]; then root=${2:?--root needs a directory}; fi
shopt -s nullglob

is_libclang() { # $1: a path; true if clang-sys would take it
  local name
  name=$(basename "$1")
  case "$name" in
    *-cpp.*) return 1 ;;
    libclang.so | libclang-*.so | libclang.so.* | libclang-*.so.*) ;;
    *) return 1 ;;
  esac
  [ -f "$1" ] || return 1
  # An ELF header, read from the file the link resolves to.
  [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]
}

dirs=()
if [ -n "${LIBCLANG_PATH:-}" ] && [ -z "$root" ]; then
  # clang-sys takes a file or a directory here, and searches nowhere else.
  if [ -f "$LIBCLANG_PATH" ]; then
    is_libclang "$LIBCLANG_PATH" && { echo "$LIBCLANG_PATH"; exit 0; }
    exit 1
  fi
  dirs+=("$LIBCLANG_PATH")
else
  for d in "$root"/usr/local/llvm*/lib* "$root"/usr/local/lib*/*/* "$root"/usr/local/lib*/* \
    "$root"/usr/local/lib* "$root"/usr/lib*/*/* "$root"/usr/lib*/* "$root"/usr/lib*; do
    [ -d "$d" ] && dirs+=("$d")
  done
fi
for d in "${dirs[@]}"; do
  for f in "$d"/libclang.so "$d"/libclang-*.so "$d"/libclang.so.* "$d"/libclang-*.so.*; do
    if is_libclang "$f"; then
      echo "$f"
      exit 0
    fi
  done
done
exit 1
