#!/usr/bin/env python3
"""Converter-made fixtures for tally: random Qwen3_5MoeForCausalLM models, converted to GGUF by
llama.cpp's own convert_hf_to_gguf.py, with transformers' float64 logits as the reference.

For each configuration in CONFIGS this script
1. builds a random `Qwen3_5MoeForCausalLM` (transformers 5.17), with weights drawn so activations
   stay unit-scale through every layer and the router's top-k is never a near-tie (see
   `init_weights`), and saves it (float32 safetensors) with a tiny byte-level BPE tokenizer
   trained here and a ChatML-style chat template;
2. for an MTP twin, adds random `mtp.*` tensors to the saved checkpoint, named as in the
   released Qwen3.5/3.6 checkpoints (transformers ignores them; the converter maps them to
   `blk.N.nextn.*` and block N);
3. converts the checkpoint with the converter from the llama-cpp-python sdist (its own gguf-py)
   to f32, q8_0 and bf16;
4. runs the HF checkpoint (the truth: nothing the converter did is undone) in float64 on a fixed
   prompt, then greedily for GREEDY steps through its own cache, and writes the prompt, the
   greedy tokens and the logits of every step to `<name>.ref.gguf`.

The converter identifies BPE pre-tokenizers by the hash of a test string's tokens; it does not
know this script's tokenizer, so `get_vocab_base_pre` is patched to answer "qwen35" (the real
model's pre-tokenizer) when the original raises. Nothing else in the converter is touched.

Usage (from the repository root; see crates/engine/tests/fixtures/converter/README.md):
    /work/venv/bin/python tools/convert/make_fixtures.py --out crates/engine/tests/fixtures/converter
    (--only conv-c,conv-d-mtp builds just those; the others' files are left as they are)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LLAMA = Path("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp")
PROMPT = "The quick brown fox jumps."
GREEDY = 8
OUTTYPES = ("f32", "q8_0", "bf16")
# Margins that make the fixtures' decisions robust to the errors of q8_0 and bf16 (a few 1e-3
# relative, i.e. ~0.01 on logits of unit scale): the k-th minus the (k+1)-th router logit of
# every token in every layer, and the top-1 minus top-2 output logit at every greedy step.
ROUTER_GAP_MIN = 0.02
LOGIT_GAP_MIN = 0.05
SEED_TRIES = 64


@dataclass(frozen=True)
class Fixture:
    """One model shape. Head ratios and expert counts differ from `tally synth`'s presets (tiny:
    8:1 attention, 1:2 linear, 8 experts top-2; tiny-odd: 2:1, 1:4, 16 top-3). Every row length
    is a multiple of 32, so q8_0 quantises every matrix."""

    name: str
    layers: int
    interval: int
    heads: tuple[int, int, int, float]  # query heads, kv heads, head dim, partial rotary factor
    linear: tuple[int, int, int, int]  # key heads, value heads, key dim, value dim
    moe: tuple[int, int, int, int]  # experts, used, expert ffn, shared ffn
    seed: int
    mtp: bool = False


CONFIGS = [
    # 4:1 attention, 1:1 linear, 4 experts top-2; layers L F L F (the last is full attention)
    Fixture("conv-a", 4, 2, (4, 1, 8, 0.5), (4, 4, 8, 8), (4, 2, 32, 32), seed=12),
    # 1:1 attention (MHA), 1:3 linear, 6 experts top-3; layers L L F
    Fixture("conv-b", 3, 3, (4, 4, 8, 0.25), (2, 6, 8, 16), (6, 3, 32, 32), seed=23),
    # conv-a's trunk (same seed, same weights) plus one MTP block
    Fixture("conv-a-mtp", 4, 2, (4, 1, 8, 0.5), (4, 4, 8, 8), (4, 2, 32, 32), seed=12, mtp=True),
    # The head dims the CUDA kernels run (attention 32/64/128/256; delta rule key 64/128, value
    # 32..128 in steps of 32); conv-a/b/a-mtp above stop there at the kernel limits.
    # The real model's head dims: attention head dim 256 with partial rotary 0.25 (its 16:2 heads
    # shrunk to 2:1), delta rule key dim 128 and value dim 128 with key:value heads 1:2 (16:32 in
    # the real model); 8 experts top-2; layers L F
    Fixture("conv-c", 2, 2, (2, 1, 256, 0.25), (1, 2, 128, 128), (8, 2, 32, 32), seed=31),
    # The other supported dims: attention 64 (4:1, rotary 32), delta rule key 64, value 32 with
    # heads 1:4; 8 experts top-4; layers L F plus one MTP block (no plain twin, to stay small:
    # 16 experts made the f32 file 1.04 MB, the MoE being 3/5 of the parameters)
    Fixture("conv-d-mtp", 2, 2, (4, 1, 64, 0.5), (1, 4, 64, 32), (8, 4, 32, 32), seed=41, mtp=True),
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = """\
The quick brown fox jumps over the lazy dog. A tally is a count kept by marks; a ledger keeps
the accounts. Models read tokens, route them to experts, and write the next token. The delta
rule keeps a state; attention keeps a cache. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.
"""


# ----------------------------------------------------------------------------------------------
# The HF model
# ----------------------------------------------------------------------------------------------

def hf_config(fx: Fixture, vocab: int):
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig

    nh, nkv, hd, prf = fx.heads
    kh, vh, kd, vd = fx.linear
    ne, nu, ffn, sffn = fx.moe
    layer_types = ["full_attention" if (i + 1) % fx.interval == 0 else "linear_attention"
                   for i in range(fx.layers)]
    pairs = int(hd * prf) // 2
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=fx.layers,
        num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
        linear_conv_kernel_dim=4, linear_key_head_dim=kd, linear_value_head_dim=vd,
        linear_num_key_heads=kh, linear_num_value_heads=vh,
        moe_intermediate_size=ffn, shared_expert_intermediate_size=sffn,
        num_experts=ne, num_experts_per_tok=nu, rms_norm_eps=1e-6,
        max_position_embeddings=4096, layer_types=layer_types, tie_word_embeddings=False,
        partial_rotary_factor=prf,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": prf,
                         "mrope_section": [pairs - pairs // 2, pairs // 2, 0], "mrope_interleaved": True},
        bos_token_id=None, eos_token_id=0, pad_token_id=None,
    )
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def init_weights(model, fx: Fixture, rng: np.random.Generator) -> None:
    """Weights in HF's own parametrisation (zero-centred RMSNorm weights applied as 1 + w).

    Projections into a block get std 1/sqrt(fan_in) (unit-RMS inputs after the norms give
    unit-scale outputs); projections back into the residual stream are damped by
    1/sqrt(2 * layers); routers get std 4/sqrt(d) with a per-expert popularity skew, so the
    softmax is far from uniform and top-k decisions have clear gaps; the head has std
    3/sqrt(d) so greedy decisions have clear margins. ssm_a = -exp(A_log) with A_log uniform in
    [-2, 1]; conv taps N(0, 0.5^2); dt_bias N(0, 0.5^2)."""
    import torch

    resid = 1.0 / np.sqrt(2.0 * fx.layers)
    sd = model.state_dict()
    out = {}
    for name, t in sd.items():
        shape = tuple(t.shape)
        fan_in = shape[-1]
        short = name.rsplit(".", 1)[0] if name.endswith(".weight") else name
        if name.endswith("embed_tokens.weight"):
            v = rng.normal(0, 1, shape)
        elif name.endswith("lm_head.weight"):
            v = rng.normal(0, 3 / np.sqrt(fan_in), shape)
        elif name.endswith("linear_attn.norm.weight"):
            v = 1 + rng.normal(0, 0.05, shape)  # the gated norm is plain * w
        elif "norm" in short.rsplit(".", 1)[-1] or name.endswith("layernorm.weight"):
            v = rng.normal(0, 0.05, shape)  # applied as 1 + w
        elif name.endswith("A_log"):
            v = rng.uniform(-2, 1, shape)
        elif name.endswith("dt_bias"):
            v = rng.normal(0, 0.5, shape)
        elif name.endswith("conv1d.weight"):
            v = rng.normal(0, 0.5, shape)
        elif name.endswith("mlp.gate.weight"):
            pop = np.exp(0.3 * rng.normal(0, 1, (shape[0], 1)))
            v = rng.normal(0, 4 / np.sqrt(fan_in), shape) * pop
        elif name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight", "experts.down_proj")):
            v = rng.normal(0, resid / np.sqrt(fan_in), shape)
        else:
            v = rng.normal(0, 1 / np.sqrt(fan_in), shape)
        out[name] = torch.from_numpy(np.asarray(v, dtype=np.float32))
    model.load_state_dict(out, strict=True)


def mtp_tensors(fx: Fixture, cfg, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random `mtp.*` tensors named as in the released checkpoints (Qwen/Qwen3.5-35B-A3B):
    `mtp.fc` [d, 2d], `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.norm` and one
    full-attention decoder layer with MoE, experts stored one by one, under `mtp.layers.0.`."""
    d = cfg.hidden_size
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    ne, ffn, sffn = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
    resid = 1.0 / np.sqrt(2.0 * fx.layers)

    def lin(o, i, damp=1.0):
        return rng.normal(0, damp / np.sqrt(i), (o, i))

    def norm(n):
        return rng.normal(0, 0.05, (n,))

    t = {
        "mtp.fc.weight": lin(d, 2 * d),
        "mtp.pre_fc_norm_embedding.weight": norm(d),
        "mtp.pre_fc_norm_hidden.weight": norm(d),
        "mtp.norm.weight": norm(d),
    }
    p = "mtp.layers.0."
    t[p + "input_layernorm.weight"] = norm(d)
    t[p + "post_attention_layernorm.weight"] = norm(d)
    t[p + "self_attn.q_proj.weight"] = lin(2 * nh * hd, d)
    t[p + "self_attn.k_proj.weight"] = lin(nkv * hd, d)
    t[p + "self_attn.v_proj.weight"] = lin(nkv * hd, d)
    t[p + "self_attn.o_proj.weight"] = lin(d, nh * hd, resid)
    t[p + "self_attn.q_norm.weight"] = norm(hd)
    t[p + "self_attn.k_norm.weight"] = norm(hd)
    t[p + "mlp.gate.weight"] = lin(ne, d, 4.0)
    for e in range(ne):
        t[p + f"mlp.experts.{e}.gate_proj.weight"] = lin(ffn, d)
        t[p + f"mlp.experts.{e}.up_proj.weight"] = lin(ffn, d)
        t[p + f"mlp.experts.{e}.down_proj.weight"] = lin(d, ffn, resid)
    t[p + "mlp.shared_expert.gate_proj.weight"] = lin(sffn, d)
    t[p + "mlp.shared_expert.up_proj.weight"] = lin(sffn, d)
    t[p + "mlp.shared_expert.down_proj.weight"] = lin(d, sffn, resid)
    t[p + "mlp.shared_expert_gate.weight"] = lin(1, d)
    return {k: np.asarray(v, dtype=np.float32) for k, v in t.items()}


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------

def train_tokenizer(out: Path, vocab: int):
    """A byte-level BPE of `vocab` ids (256 bytes, merges, the special tokens), saved as a fast
    tokenizer with the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   additional_special_tokens=SPECIALS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


# ----------------------------------------------------------------------------------------------
# Reference run
# ----------------------------------------------------------------------------------------------

def reference(model_dir: Path, prompt: list[int]):
    """Loads the saved checkpoint in float64 (exact upcast of its float32 weights) and runs the
    prompt, then GREEDY greedy steps. Returns (greedy ids, logits per step, router gaps, logit gaps)."""
    import torch

    sys.path.insert(0, str(REPO / "tools" / "reference"))
    import golden  # the float64 discipline of the goldens: the same proxy, the same checks

    mod = golden._modeling()
    with golden.strict_float64(True):
        model = mod.Qwen3_5MoeForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
        model.config._attn_implementation = "eager"
        model.config._experts_implementation = "eager"
        model = model.eval()
        rot = model.model.rotary_emb
        dim = int(model.config.head_dim * model.config.rope_parameters["partial_rotary_factor"])
        theta = float(model.config.rope_parameters["rope_theta"])
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        rot.inv_freq, rot.original_inv_freq = inv, inv.clone()
        router: list[np.ndarray] = []
        hooks = [layer.mlp.gate.register_forward_hook(
            lambda _m, _i, out: router.append(out[0].detach().double().numpy().copy()))
            for layer in model.model.layers]
        logits, ids = [], []
        with torch.no_grad():
            res = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
            for _ in range(GREEDY + 1):
                row = res.logits[0, -1].double().numpy().copy()
                logits.append(row)
                nxt = int(np.argmax(row))
                if len(ids) == GREEDY:
                    break
                ids.append(nxt)
                res = model(input_ids=torch.tensor([[nxt]]), past_key_values=res.past_key_values, use_cache=True)
        for h in hooks:
            h.remove()
    k = model.config.num_experts_per_tok
    s = -np.sort(-np.concatenate(router, axis=0), axis=-1)
    router_gap = float(np.min(s[:, k - 1] - s[:, k]))
    logit_gap = float(min(np.sort(r)[-1] - np.sort(r)[-2] for r in logits))
    return ids, logits, router_gap, logit_gap


def write_reference(path: Path, fx: Fixture, prompt, ids, logits, meta: dict) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "tally-converter-reference")
    for key, val in meta.items():
        if isinstance(val, str):
            w.add_string(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        elif isinstance(val, float):
            w.add_float32(key, val)
    w.add_tensor("prompt_ids", np.asarray(prompt, dtype=np.int32))
    w.add_tensor("greedy_ids", np.asarray(ids, dtype=np.int32))
    for j, row in enumerate(logits):  # logits.0: after the prompt; logits.j: after greedy_ids[j-1]
        w.add_tensor(f"logits.{j}", np.ascontiguousarray(row, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------

CONVERT_SHIM = r"""
import runpy, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[1] + "/gguf-py")
from conversion import base
orig = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "qwen35"  # this script's tokenizer is unknown to the converter's hash table
base.TextModel.get_vocab_base_pre = pre
script = sys.argv[1] + "/convert_hf_to_gguf.py"
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def convert(llama: Path, model_dir: Path, out: Path, outtype: str, mtp: bool) -> None:
    """Runs the converter. Its Qwen3.5 class insists on an MTP block unless told `--no-mtp`
    (a checkpoint without `mtp_num_hidden_layers` and without `mtp.*` tensors fails an assert),
    so the plain fixtures are converted with `--no-mtp`."""
    env = dict(os.environ, PYTHONPATH=str(llama / "gguf-py"), NO_LOCAL_GGUF="")
    cmd = [sys.executable, "-c", CONVERT_SHIM, str(llama), str(model_dir), "--outtype", outtype,
           "--outfile", str(out)] + ([] if mtp else ["--no-mtp"])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-8000:])
        raise SystemExit(f"converter failed for {model_dir} -> {outtype}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_mtp(model_dir: Path, fx: Fixture, cfg, seed: int) -> None:
    from safetensors.numpy import load_file, save_file

    st = model_dir / "model.safetensors"
    tensors = load_file(str(st))
    tensors.update(mtp_tensors(fx, cfg, np.random.default_rng(seed + 1000)))
    save_file(tensors, str(st), metadata={"format": "pt"})
    c = json.loads((model_dir / "config.json").read_text())
    c["mtp_num_hidden_layers"] = 1  # as in the released config.json
    (model_dir / "config.json").write_text(json.dumps(c, indent=2))


def build(fx: Fixture, work: Path, vocab: int):
    """Saves the checkpoint of the first seed from fx.seed whose reference has clear router and
    greedy margins; returns (model dir, seed, tokenizer, reference)."""
    import torch

    sys.path.insert(0, str(REPO / "tools" / "reference"))
    import golden

    mod = golden._modeling()
    for seed in range(fx.seed, fx.seed + SEED_TRIES):
        d = work / f"{fx.name}-{seed}"
        d.mkdir(parents=True, exist_ok=True)
        tok = train_tokenizer(d, vocab)
        cfg = hf_config(fx, len(tok))
        torch.manual_seed(seed)
        model = mod.Qwen3_5MoeForCausalLM(cfg)
        init_weights(model, fx, np.random.default_rng(seed))
        model.save_pretrained(d)
        prompt = tok.encode(PROMPT)
        ref = reference(d, prompt)
        _, _, rgap, lgap = ref
        print(f"{fx.name} seed {seed}: router min logit gap {rgap:.3f}, greedy min logit gap {lgap:.3f}",
              flush=True)
        if rgap >= ROUTER_GAP_MIN and lgap >= LOGIT_GAP_MIN:
            if fx.mtp:
                add_mtp(d, fx, cfg, seed)
            return d, seed, tok, prompt, ref, cfg
    raise SystemExit(f"{fx.name}: no seed in {SEED_TRIES} tries has clear margins")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="fixture folder")
    ap.add_argument("--llama", type=Path, default=DEFAULT_LLAMA, help="llama.cpp source tree with the converter")
    ap.add_argument("--vocab", type=int, default=320, help="tokenizer vocabulary size")
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args(argv)

    import torch
    import transformers

    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    unknown = only - {fx.name for fx in CONFIGS}
    if unknown:
        ap.error(f"unknown fixture(s) {sorted(unknown)}; known: {[fx.name for fx in CONFIGS]}")
    with tempfile.TemporaryDirectory(prefix="tally-convert-") as tmp:
        for fx in CONFIGS:
            if only and fx.name not in only:
                continue
            d, seed, _tok, prompt, (ids, logits, rgap, lgap), cfg = build(fx, Path(tmp), args.vocab)
            files = {}
            for ot in OUTTYPES:
                f = args.out / f"{fx.name}-{ot}.gguf"
                convert(args.llama, d, f, ot, fx.mtp)
                files[ot] = f
                print(f"  {f} ({f.stat().st_size} bytes)")
            meta = {
                "reference.fixture": fx.name,
                "reference.seed": seed,
                "reference.prompt": PROMPT,
                "reference.dtype": "float64 (transformers' float32 casts removed, as golden.py)",
                "reference.transformers_version": transformers.__version__,
                "reference.torch_version": torch.__version__,
                "reference.router_min_logit_gap": rgap,
                "reference.greedy_min_logit_gap": lgap,
                "reference.mtp": "random mtp.* tensors (ignored by transformers)" if fx.mtp else "none",
            }
            for ot, f in files.items():
                meta[f"reference.sha256.{ot}"] = sha256(f)
            ref = args.out / f"{fx.name}.ref.gguf"
            write_reference(ref, fx, prompt, ids, logits, meta)
            print(f"  {ref}: prompt {prompt}, greedy {ids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
