#!/usr/bin/env python3
"""The PDL audit's check (tools/cuda/pdl_audit.sh): reads nvdisasm's listing of sm_90a cubins and
fails when a kernel touches global memory before its griddepcontrol.wait.

Under programmatic dependent launch a kernel's blocks may start while the previous kernel still
runs; `pdl_enter()` (common.cuh) makes `griddepcontrol.wait` (SASS `ACQBULK`) every kernel's first
statement, and the PTX puts every load after it. But the machine code is what runs: ptxas could
schedule a non-coherent load (`LDG.E.CONSTANT`, from `__ldg`) above the wait, and it would then
read an input the previous kernel has not finished writing (llama.cpp met this with
`__restrict__` pointers under PDL). This checks the SASS itself: in every function, no global
load, store, atomic or bulk / TMA copy before the first ACQBULK; only L2 prefetches (`UBLKPF`,
`pdl_enter_prefetch`) may come first. Shared-memory accesses and mbarrier setup are allowed (no
other grid writes a block's shared memory). A function without ACQBULK fails too (every kernel
enters through pdl_enter).

Usage: pdl_audit.py NVDISASM CUBIN... ; exit 1 on any finding, 2 on bad input.
"""
import re
import subprocess
import sys

# Global-memory instructions (their mnemonic before the first '.'): loads, stores, atomics and
# reductions, async global->shared copies, bulk and TMA copies.
GLOBAL = {"LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG", "LDGSTS", "UBLKCP", "UBLKRED",
          "UTMALDG", "UTMASTG", "UTMAREDG"}
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def audit(nvdisasm, cubin):
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{cubin}: nvdisasm failed: {out.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    findings, n = [], 0
    parts = re.split(r"^\s*\.section\s+\.text\.(\S+?),", out.stdout, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        name = name.strip('"')
        n += 1
        ins = INSN.findall(body)
        if "ACQBULK" not in ins:
            findings.append(f"{cubin}: {name}: no griddepcontrol.wait (ACQBULK)")
            continue
        early = sorted({i for i in ins[: ins.index("ACQBULK")] if i in GLOBAL})
        if early:
            findings.append(f"{cubin}: {name}: global memory before griddepcontrol.wait: {', '.join(early)}")
    return n, findings


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    total, findings = 0, []
    for cubin in sys.argv[2:]:
        n, f = audit(sys.argv[1], cubin)
        total += n
        findings += f
    for f in findings:
        print(f)
    print(f"pdl audit: {total} kernels, {len(findings)} findings")
    if total == 0:
        print("pdl audit: no kernels found in the listing", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
