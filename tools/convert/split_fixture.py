#!/usr/bin/env python3
"""Splits a GGUF file into parts the way llama.cpp's tools do, with llama.cpp's own gguf-py:
the reader, the metadata copy of gguf-py's `gguf_new_metadata` script, and `GGUFWriter` with
`split_max_tensors` (what `convert_hf_to_gguf.py --split-max-tensors N` uses). The parts are
named PREFIX-00001-of-0000N.gguf; the first holds the metadata, every part its tensors and the
split.* keys.

    tools/reference/.venv/bin/python tools/convert/split_fixture.py IN.gguf OUT_DIR MAX_TENSORS

makes crates/engine/tests/fixtures/converter/split/ from conv-a-mtp-q8_0.gguf with 40 tensors a
part (three parts). Needs the gguf package (tools/reference/requirements.txt).
"""
import sys
from pathlib import Path

import gguf
from gguf.scripts.gguf_new_metadata import copy_with_new_metadata


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out_dir, max_tensors = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    reader = gguf.GGUFReader(src, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(out_dir / src.name, arch=arch, split_max_tensors=max_tensors)
    copy_with_new_metadata(reader, writer, {}, [])


if __name__ == "__main__":
    main()
