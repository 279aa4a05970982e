#!/usr/bin/env python3
"""Turns attention.cu into C++ for the CPU emulator: the PTX helpers (inline asm) are cut out and
replaced by emu_helpers.h, and the dynamic shared array becomes a plain global buffer."""
import re, sys

src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
HELPERS = ["ex2", "smem_u32", "ldsm_x4", "ldsm_x4_t", "mma16816", "cp_async16", "cp_async_commit", "cp_async_wait_all"]
for name in HELPERS:
    m = re.search(r"__device__ __forceinline__ [\w ]+?\b" + name + r"\(", s)
    if not m:
        sys.exit("helper not found: " + name)
    i = s.index("{", m.end())
    depth, j = 0, i
    while True:
        if s[j] == "{": depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0: break
        j += 1
    s = s[:m.start()] + "/* emu: " + name + " */" + s[j + 1:]
ext = "extern __shared__ __align__(16) unsigned char attn_smem[];"
if ext not in s:
    sys.exit("dynamic shared declaration not found")
s = s.replace(ext, "alignas(16) unsigned char attn_smem[232448];")
s = s.replace("namespace attn {", "namespace attn {\n#include \"emu_helpers.h\"", 1)
s = "#define TALLY_ATTN_EMU 1\n" + s
open(dst, "w").write(s)
