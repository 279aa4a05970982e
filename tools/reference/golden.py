#!/usr/bin/env python3
"""Golden outputs for tally: run transformers' Qwen3_5MoeForCausalLM on the weights of a qwen35moe GGUF.

The GGUF is read with gguf-py, every tensor is dequantised to float, the changes that llama.cpp's
HF->GGUF converter made are undone (see `gguf_to_hf_state_dict`), and the result is loaded with
strict=True into the reference implementation. The model then runs one prompt (prefill) and a few
teacher-forced decode steps through its own cache; the residual stream after every layer and the
logits are written to a small GGUF of F32 tensors that the Rust tests read.

Usage: golden.py MODEL.gguf OUT.gguf [--preset NAME] (see --help; setup in README.md).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ARCH = "qwen35moe"
PROMPT_LEN = 11
DECODE_STEPS = 4
PROMPT_SEED = 20260101  # fixed: the prompt and decode ids are part of the golden contract
ROUTER_GAP_WARN = 1e-5


# ----------------------------------------------------------------------------------------------
# GGUF input
# ----------------------------------------------------------------------------------------------

@dataclass
class Arch:
    """Hyper-parameters read from the GGUF metadata (names follow transformers' config)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_conv_kernel_dim: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    rms_norm_eps: float
    rope_theta: float
    rope_dim: int
    rope_sections: list[int]
    max_position_embeddings: int
    layer_types: list[str]
    tie_word_embeddings: bool
    ignored_tensors: list[str] = field(default_factory=list)


def _field_value(f):
    import gguf

    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()


def load_gguf(path: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, str]]:
    """Returns (metadata, tensors as float64 numpy arrays in numpy order, tensor type names).

    gguf-py returns arrays whose numpy shape is the ggml `ne` list reversed, e.g. a matrix with
    ne = {n_in, n_out} arrives as [n_out, n_in]: the same row-major layout as a torch Linear weight.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {name: _field_value(f) for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    tensors, types_ = {}, {}
    for t in reader.tensors:
        np_shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(data, dtype=np.float64).reshape(np_shape)
        types_[t.name] = t.tensor_type.name
    return meta, tensors, types_


def derive_arch(meta: dict, tensors: dict[str, np.ndarray]) -> Arch:
    if meta.get("general.architecture") != ARCH:
        raise SystemExit(f"expected general.architecture={ARCH!r}, got {meta.get('general.architecture')!r}")

    def get(key, default=None):
        full = f"{ARCH}.{key}"
        if full in meta:
            return meta[full]
        if default is None:
            raise SystemExit(f"missing metadata key {full}")
        return default

    n_block = int(get("block_count"))
    n_layer = n_block - int(get("nextn_predict_layers", 0))  # MTP blocks are extra, unused layers
    head_dim = int(get("attention.key_length"))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise SystemExit("attention.key_length != attention.value_length is not supported by the HF model")
    n_v = int(get("ssm.time_step_rank"))
    inner = int(get("ssm.inner_size"))
    if inner % n_v:
        raise SystemExit(f"ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {n_v}")
    recurrent = meta.get(f"{ARCH}.attention.recurrent_layers")
    if recurrent is not None:
        layer_types = ["linear_attention" if r else "full_attention" for r in recurrent[:n_layer]]
    else:
        interval = int(get("full_attention_interval", 4))
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layer)]
    sections = [int(s) for s in get("rope.dimension_sections", [0, 0, 0, 0])]
    emb = tensors["token_embd.weight"]
    ignored = sorted(n for n in tensors if n.startswith("blk.") and int(n.split(".")[1]) >= n_layer)
    return Arch(
        vocab_size=int(emb.shape[0]),
        hidden_size=int(get("embedding_length")),
        num_hidden_layers=n_layer,
        num_attention_heads=int(get("attention.head_count")),
        num_key_value_heads=int(get("attention.head_count_kv")),
        head_dim=head_dim,
        linear_conv_kernel_dim=int(get("ssm.conv_kernel")),
        linear_key_head_dim=int(get("ssm.state_size")),
        linear_value_head_dim=inner // n_v,
        linear_num_key_heads=int(get("ssm.group_count")),
        linear_num_value_heads=n_v,
        moe_intermediate_size=int(get("expert_feed_forward_length")),
        shared_expert_intermediate_size=int(get("expert_shared_feed_forward_length")),
        num_experts=int(get("expert_count")),
        num_experts_per_tok=int(get("expert_used_count")),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_theta=float(get("rope.freq_base")),
        rope_dim=int(get("rope.dimension_count")),
        rope_sections=sections,
        max_position_embeddings=int(get("context_length", 4096)),
        layer_types=layer_types,
        tie_word_embeddings="output.weight" not in tensors,
        ignored_tensors=ignored,
    )


# ----------------------------------------------------------------------------------------------
# GGUF -> HF weights: undo the converter
# ----------------------------------------------------------------------------------------------

def untile_v_heads(x: np.ndarray, axis: int, n_k: int, n_v: int, head_dim: int) -> np.ndarray:
    """Inverse of the converter's `_reorder_v_heads` (grouped -> tiled) along `axis`.

    GGUF value head j = r * n_k + g (key head g = j % n_k) is HF value head g * (n_v / n_k) + r
    (key head (g*r_per_k + r) // r_per_k = g). Here: view the axis as [r_per_k, n_k, head_dim], swap.
    """
    r = n_v // n_k
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(r, n_k, head_dim, *rest).swapaxes(0, 1).reshape(n_v * head_dim, *rest)
    return np.moveaxis(x, 0, axis)


def gguf_to_hf_state_dict(arch: Arch, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Maps dequantised GGUF tensors (numpy order) to Qwen3_5MoeForCausalLM's state dict.

    Every GGUF tensor of layers < num_hidden_layers is consumed; a leftover is an error.
    """
    used: set[str] = set()

    def take(name: str) -> np.ndarray:
        if name not in g:
            raise SystemExit(f"missing tensor {name}")
        used.add(name)
        return g[name]

    n_k, n_v = arch.linear_num_key_heads, arch.linear_num_value_heads
    dk, dv = arch.linear_key_head_dim, arch.linear_value_head_dim
    key_dim = n_k * dk
    sd: dict[str, np.ndarray] = {}
    sd["model.embed_tokens.weight"] = take("token_embd.weight")
    # converter: norm.weight + 1 for every "*norm.weight" but linear_attn.norm
    sd["model.norm.weight"] = take("output_norm.weight") - 1.0
    if not arch.tie_word_embeddings:
        sd["lm_head.weight"] = take("output.weight")
    for i, kind in enumerate(arch.layer_types):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = take(b + "attn_norm.weight") - 1.0
        sd[h + "post_attention_layernorm.weight"] = take(b + "post_attention_norm.weight") - 1.0
        if kind == "linear_attention":
            la = h + "linear_attn."
            qkv = take(b + "attn_qkv.weight")
            v_rows = untile_v_heads(qkv[2 * key_dim:], 0, n_k, n_v, dv)
            sd[la + "in_proj_qkv.weight"] = np.concatenate([qkv[: 2 * key_dim], v_rows], axis=0)
            sd[la + "in_proj_z.weight"] = untile_v_heads(take(b + "attn_gate.weight"), 0, n_k, n_v, dv)
            sd[la + "in_proj_b.weight"] = untile_v_heads(take(b + "ssm_beta.weight"), 0, n_k, n_v, 1)
            sd[la + "in_proj_a.weight"] = untile_v_heads(take(b + "ssm_alpha.weight"), 0, n_k, n_v, 1)
            sd[la + "dt_bias"] = untile_v_heads(take(b + "ssm_dt.bias"), 0, n_k, n_v, 1)
            ssm_a = untile_v_heads(take(b + "ssm_a"), 0, n_k, n_v, 1)
            if np.any(ssm_a >= 0):
                raise SystemExit(f"{b}ssm_a has non-negative entries; expected -exp(A_log) < 0")
            sd[la + "A_log"] = np.log(-ssm_a)
            conv = take(b + "ssm_conv1d.weight")  # [channels, kernel]; HF Conv1d weight is [channels, 1, kernel]
            conv = np.concatenate([conv[: 2 * key_dim], untile_v_heads(conv[2 * key_dim:], 0, n_k, n_v, dv)])
            sd[la + "conv1d.weight"] = conv[:, None, :]
            sd[la + "norm.weight"] = take(b + "ssm_norm.weight")  # the one norm stored without +1
            sd[la + "out_proj.weight"] = untile_v_heads(take(b + "ssm_out.weight"), 1, n_k, n_v, dv)
        else:
            sa = h + "self_attn."
            # attn_q rows are [head0: query(head_dim) | gate(head_dim), head1: ...] in both formats
            sd[sa + "q_proj.weight"] = take(b + "attn_q.weight")
            sd[sa + "k_proj.weight"] = take(b + "attn_k.weight")
            sd[sa + "v_proj.weight"] = take(b + "attn_v.weight")
            sd[sa + "o_proj.weight"] = take(b + "attn_output.weight")
            sd[sa + "q_norm.weight"] = take(b + "attn_q_norm.weight") - 1.0
            sd[sa + "k_norm.weight"] = take(b + "attn_k_norm.weight") - 1.0
        m = h + "mlp."
        sd[m + "gate.weight"] = take(b + "ffn_gate_inp.weight")
        if b + "ffn_gate_up_exps.weight" in g:
            sd[m + "experts.gate_up_proj"] = take(b + "ffn_gate_up_exps.weight")  # [E, 2F, D], gate first
        else:
            sd[m + "experts.gate_up_proj"] = np.concatenate(
                [take(b + "ffn_gate_exps.weight"), take(b + "ffn_up_exps.weight")], axis=1)
        sd[m + "experts.down_proj"] = take(b + "ffn_down_exps.weight")  # [E, D, F]
        sd[m + "shared_expert.gate_proj.weight"] = take(b + "ffn_gate_shexp.weight")
        sd[m + "shared_expert.up_proj.weight"] = take(b + "ffn_up_shexp.weight")
        sd[m + "shared_expert.down_proj.weight"] = take(b + "ffn_down_shexp.weight")
        sd[m + "shared_expert_gate.weight"] = take(b + "ffn_gate_inp_shexp.weight").reshape(1, arch.hidden_size)
    leftover = sorted(set(g) - used - set(arch.ignored_tensors))
    if leftover:
        raise SystemExit(f"GGUF tensors not mapped to the HF model: {leftover}")
    return sd


# ----------------------------------------------------------------------------------------------
# The transformers model
# ----------------------------------------------------------------------------------------------

def _modeling():
    """The reference module, after making sure only its pure-torch paths can run."""
    import importlib.util

    import transformers

    for pkg in ("fla", "causal_conv1d", "kernels"):
        if importlib.util.find_spec(pkg) is not None:
            raise SystemExit(f"package {pkg!r} is installed: its kernels would replace the torch reference paths")
    transformers.logging.set_verbosity_error()  # silences the 'falling back to the torch path' notes
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe

    return modeling_qwen3_5_moe


@contextlib.contextmanager
def strict_float64(enabled: bool):
    """Makes the reference code stay in float64 where it hard-codes float32.

    modeling_qwen3_5_moe casts to torch.float32 (RMSNorm, gated RMSNorm, both delta-rule
    functions, router softmax, attention softmax, RoPE cos/sin, A_log/softplus) via `x.float()`,
    `dtype=torch.float` and `.to(torch.float32)`. In a float64 run these would truncate to float32.
    While enabled, that module's `torch` global is a proxy whose float32/float name float64, and
    Tensor.float() converts to float64. The maths is untouched; check.py confirms agreement with
    an independent float64 numpy implementation to ~1e-13.
    """
    if not enabled:
        yield
        return
    import torch

    mod = _modeling()

    class _TorchF64(types.ModuleType):
        def __getattr__(self, name):
            if name in ("float32", "float"):
                return torch.float64
            return getattr(torch, name)

    saved_torch, saved_float = mod.torch, torch.Tensor.float
    mod.torch = _TorchF64("torch")
    torch.Tensor.float = lambda self, memory_format=torch.preserve_format: self.to(
        torch.float64, memory_format=memory_format)
    try:
        yield
    finally:
        mod.torch = saved_torch
        torch.Tensor.float = saved_float


def hf_config(arch: Arch):
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig

    if arch.rope_dim % 2 or arch.rope_dim > arch.head_dim:
        raise SystemExit(f"bad rope.dimension_count {arch.rope_dim} for head_dim {arch.head_dim}")
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        head_dim=arch.head_dim,
        linear_conv_kernel_dim=arch.linear_conv_kernel_dim,
        linear_key_head_dim=arch.linear_key_head_dim,
        linear_value_head_dim=arch.linear_value_head_dim,
        linear_num_key_heads=arch.linear_num_key_heads,
        linear_num_value_heads=arch.linear_num_value_heads,
        moe_intermediate_size=arch.moe_intermediate_size,
        shared_expert_intermediate_size=arch.shared_expert_intermediate_size,
        num_experts=arch.num_experts,
        num_experts_per_tok=arch.num_experts_per_tok,
        rms_norm_eps=arch.rms_norm_eps,
        max_position_embeddings=arch.max_position_embeddings,
        layer_types=arch.layer_types,
        tie_word_embeddings=arch.tie_word_embeddings,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": arch.rope_theta,
            "partial_rotary_factor": arch.rope_dim / arch.head_dim,
            # text-only: all three position rows are equal, so the sections do not change the result
            "mrope_section": arch.rope_sections[:3],
            "mrope_interleaved": True,
        },
        use_cache=True,
    )
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def build_model(arch: Arch, sd: dict[str, np.ndarray], dtype):
    """Builds Qwen3_5MoeForCausalLM and loads `sd` with strict=True. Call inside strict_float64."""
    import torch

    mod = _modeling()
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = mod.Qwen3_5MoeForCausalLM(hf_config(arch))
    finally:
        torch.set_default_dtype(prev)
    model = model.to(dtype).eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in sd.items()}
    expected = dict(model.state_dict())
    if arch.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    for k, v in state.items():
        if k in expected and tuple(expected[k].shape) != tuple(v.shape):
            raise SystemExit(f"shape mismatch for {k}: HF {tuple(expected[k].shape)} vs GGUF-derived {tuple(v.shape)}")
    missing, unexpected = set(expected) - set(state), set(state) - set(expected)
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    model.load_state_dict(state, strict=not arch.tie_word_embeddings)
    if arch.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # the rotary inverse frequencies are a non-persistent buffer made at init: make them in float64
    rot = model.model.rotary_emb
    dim = arch.rope_dim
    inv = 1.0 / (arch.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rot.inv_freq = inv.to(dtype)
    rot.original_inv_freq = inv.clone().to(dtype)
    if model.config._attn_implementation != "eager":
        raise SystemExit(f"attention implementation is {model.config._attn_implementation}, expected eager")
    if model.config._experts_implementation != "eager":
        raise SystemExit(f"experts implementation is {model.config._experts_implementation}, expected eager")
    return model


# ----------------------------------------------------------------------------------------------
# Running and recording
# ----------------------------------------------------------------------------------------------

def token_ids(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(PROMPT_SEED)
    prompt = rng.integers(0, vocab, size=PROMPT_LEN).astype(np.int32)
    decode = rng.integers(0, vocab, size=DECODE_STEPS).astype(np.int32)
    return prompt, decode


class Recorder:
    """Forward hooks: embedding output, every decoder layer's output, every router's probabilities."""

    def __init__(self, model):
        self.hidden: dict[int, np.ndarray] = {}
        self.router_probs: dict[int, list[np.ndarray]] = {}
        self.handles = []
        m = model.model
        self.handles.append(m.embed_tokens.register_forward_hook(self._hook_hidden(0)))
        for i, layer in enumerate(m.layers):
            self.handles.append(layer.register_forward_hook(self._hook_hidden(i + 1)))
            self.handles.append(layer.mlp.gate.register_forward_hook(self._hook_router(i)))

    def _hook_hidden(self, idx):
        def hook(_mod, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            self.hidden[idx] = t.detach()[0].double().numpy().copy()  # [T, D]
        return hook

    def _hook_router(self, layer):
        def hook(_mod, _inp, out):
            logits = out[0].detach().double().numpy()  # [T, E]
            z = logits - logits.max(-1, keepdims=True)
            p = np.exp(z)
            self.router_probs.setdefault(layer, []).append(p / p.sum(-1, keepdims=True))
        return hook

    def take_hidden(self) -> dict[int, np.ndarray]:
        h, self.hidden = self.hidden, {}
        return h

    def remove(self):
        for h in self.handles:
            h.remove()


def run_model(model, prompt: np.ndarray, decode: np.ndarray) -> tuple[dict[str, np.ndarray], dict[int, list]]:
    import torch

    out: dict[str, np.ndarray] = {}
    rec = Recorder(model)
    with torch.no_grad():
        ids = torch.from_numpy(prompt.astype(np.int64))[None, :]
        res = model(input_ids=ids, use_cache=True, logits_to_keep=0)
        cache = res.past_key_values
        for i, h in sorted(rec.take_hidden().items()):
            out[f"hidden.{i}"] = h
        out["logits"] = res.logits[0, -1].double().numpy().copy()
        for j, tok in enumerate(decode):
            step = torch.tensor([[int(tok)]], dtype=torch.int64)
            res = model(input_ids=step, past_key_values=cache, use_cache=True)
            cache = res.past_key_values
            for i, h in sorted(rec.take_hidden().items()):
                out[f"decode.{j}.hidden.{i}"] = h[0]
            out[f"decode.{j}.logits"] = res.logits[0, -1].double().numpy().copy()
    rec.remove()
    return out, rec.router_probs


def router_min_gaps(router_probs: dict[int, list[np.ndarray]], k: int) -> list[float]:
    """Per layer: min over all tokens (prompt and decode) of p_(k) - p_(k+1), probabilities sorted desc."""
    gaps = []
    for layer in sorted(router_probs):
        p = np.concatenate(router_probs[layer], axis=0)
        s = -np.sort(-p, axis=-1)
        gaps.append(float(np.min(s[:, k - 1] - s[:, k])))
    return gaps


def write_golden(path: Path, records: dict[str, np.ndarray], prompt, decode, meta: dict) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "tally-golden")
    for key, val in meta.items():
        if isinstance(val, str):
            w.add_string(key, val)
        elif isinstance(val, bool):
            w.add_bool(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        elif isinstance(val, float):
            w.add_float32(key, val)
        elif isinstance(val, list):
            w.add_array(key, val)
        else:
            raise TypeError(key)
    w.add_tensor("prompt_ids", np.asarray(prompt, dtype=np.int32))
    w.add_tensor("decode_ids", np.asarray(decode, dtype=np.int32))
    for name in records:  # hidden.0..L, logits, then decode.{j}.hidden.0..L, decode.{j}.logits
        w.add_tensor(name, np.ascontiguousarray(records[name], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, help="input qwen35moe GGUF (e.g. from `tally synth`)")
    ap.add_argument("out", type=Path, help="output golden GGUF")
    ap.add_argument("--preset", default="", help="name recorded as golden.preset (e.g. tiny)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--hf-native-casts", action="store_true",
                    help="keep transformers' internal float32 casts in a float64 run (default: removed)")
    args = ap.parse_args(argv)

    import torch
    import transformers

    torch.manual_seed(0)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    strict = args.dtype == "float64" and not args.hf_native_casts

    meta, tensors, types_ = load_gguf(args.model)
    arch = derive_arch(meta, tensors)
    sd = gguf_to_hf_state_dict(arch, tensors)
    prompt, decode = token_ids(arch.vocab_size)
    with strict_float64(strict):
        model = build_model(arch, sd, dtype)
        records, router_probs = run_model(model, prompt, decode)

    gaps = router_min_gaps(router_probs, arch.num_experts_per_tok)
    print(f"model {args.model}: {arch.num_hidden_layers} layers {arch.layer_types}, vocab {arch.vocab_size}")
    print(f"tensor types: {sorted(set(types_.values()))}; ignored (MTP): {len(arch.ignored_tensors)}")
    for i, gap in enumerate(gaps):
        flag = "  WARNING: near-tie, routing is fragile" if gap < ROUTER_GAP_WARN else ""
        print(f"layer {i}: min router gap p(k)-p(k+1) = {gap:.3e}{flag}")
    if min(gaps) < ROUTER_GAP_WARN:
        print(f"WARNING: some router gap < {ROUTER_GAP_WARN}", file=sys.stderr)

    dtype_desc = args.dtype + (" (float32 casts removed)" if strict else
                               " (transformers' float32 casts kept)" if args.dtype == "float64" else "")
    out_meta = {
        "golden.source_sha256": sha256(args.model),
        "golden.source_name": args.model.name,
        "golden.transformers_version": transformers.__version__,
        "golden.torch_version": torch.__version__,
        "golden.gguf_py_version": _gguf_version(),
        "golden.dtype": dtype_desc,
        "golden.preset": args.preset,
        "golden.prompt_len": int(len(prompt)),
        "golden.decode_steps": int(len(decode)),
        "golden.n_layers": arch.num_hidden_layers,
        "golden.router_min_gap": [float(g) for g in gaps],
    }
    write_golden(args.out, records, prompt, decode, out_meta)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(records) + 2} tensors); "
          f"last-token logits argmax {int(np.argmax(records['logits']))}")
    return 0


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


if __name__ == "__main__":
    sys.exit(main())
