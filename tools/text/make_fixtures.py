#!/usr/bin/env python3
"""Writes the tokenizer fixtures of crates/text/tests/data/ (run from anywhere, with /work/venv or
any Python that has `tokenizers` and `gguf`):

  tiny.tokenizer.json   a tiny byte-level BPE (a few hundred tokens) trained here with HF
                        tokenizers, Qwen3.5's pre-tokenizer split and NFC, Qwen's special tokens
  tiny.gguf             the same vocabulary as a vocab-only GGUF (tokenizer.ggml.*), written the
                        way llama.cpp's convert_hf_to_gguf.py writes Qwen vocabularies
  corpus.json           the corpus of corpus.py, with HF's ids for tiny.tokenizer.json and, when
                        a real Qwen3.5 vocab-only GGUF is given (--qwen35 PATH, llama.cpp's
                        models/ggml-vocab-qwen35.gguf), HF's ids on that vocabulary too

HF is the oracle: the ids in corpus.json come from `tokenizers`, never from tally.
"""

import argparse
import json
import os
import sys

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import BYTES, TEXT  # noqa: E402

QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

TRAIN = [
    "The quick brown fox jumps over the lazy dog. Hello world, hello there!",
    "def main():\n    return 0\n\nfor i in range(10):\n    print(i)\n",
    "Съешь же ещё этих мягких французских булок",
    "中文分词测试我们今天去公园散步",
    "emoji 😀 👍 and café naïve résumé",
    "The answer is 42. It's what they're saying, isn't it? We'll see.",
] * 20


def qwen_like(model):
    tok = Tokenizer(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tiny():
    tok = qwen_like(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN, trainer=trainer)
    tok.add_special_tokens(CONTROL)
    tok.add_tokens(USER_DEFINED)
    return tok


def vocab_and_merges(tok):
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    merges = data["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    n = max(list(vocab.values()) + [a["id"] for a in data["added_tokens"]]) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for t, i in vocab.items():
        tokens[i] = t
        types[i] = gguf.TokenType.NORMAL
    for a in data["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    return tokens, types, merges


def write_gguf(path, tokens, types, merges, eos):
    w = gguf.GGUFWriter(path, "qwen2")
    # llama.cpp reads these hyper-parameters even for a vocab-only load.
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos)
    w.add_bos_token_id(eos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokenizer_from_gguf(path):
    """An HF tokenizer over a vocab-only GGUF's tables: Qwen3.5's tokenizer.json shape."""
    r = gguf.GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == gguf.TokenType.NORMAL}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = qwen_like(bpe)
    from tokenizers import AddedToken

    added = []
    for i, t in enumerate(tokens):
        if types[i] in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED):
            special = types[i] == gguf.TokenType.CONTROL
            added.append((i, AddedToken(t, special=special, normalized=False)))
    # Added tokens take the ids that follow the vocabulary, in order.
    for i, a in sorted(added, key=lambda x: x[0]):
        got = tok.add_special_tokens([a]) if a.special else tok.add_tokens([a])
        assert got == 1 and tok.token_to_id(a.content) == i, (i, a.content)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "crates", "text", "tests", "data"))
    ap.add_argument("--qwen35", help="llama.cpp's models/ggml-vocab-qwen35.gguf")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    tiny = train_tiny()
    tiny.save(os.path.join(a.out, "tiny.tokenizer.json"))
    tokens, types, merges = vocab_and_merges(tiny)
    gguf_path = os.path.join(a.out, "tiny.gguf")
    write_gguf(gguf_path, tokens, types, merges, tokens.index("<|endoftext|>"))
    # The GGUF must read back as the same tokenizer.
    back = tokenizer_from_gguf(gguf_path)

    real = tokenizer_from_gguf(a.qwen35) if a.qwen35 else None
    cases = []
    for text in TEXT:
        ids = tiny.encode(text, add_special_tokens=False).ids
        assert back.encode(text, add_special_tokens=False).ids == ids, text
        case = {"text": text, "tiny": ids}
        if real is not None:
            case["qwen35"] = real.encode(text, add_special_tokens=False).ids
        cases.append(case)
    doc = {
        "about": "Generated by tools/text/make_fixtures.py; ids from HF tokenizers "
        + __import__("tokenizers").__version__,
        "cases": cases,
        "bytes": BYTES,
    }
    with open(os.path.join(a.out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"tiny: {len(tokens)} tokens, {len(merges)} merges; {len(cases)} corpus cases")


if __name__ == "__main__":
    main()
