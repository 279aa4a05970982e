#!/usr/bin/env python3
"""Checks the oracle: golden.py's transformers model against an independent float64 numpy forward pass.

The numpy model below reads the GGUF tensors directly, with GGUF semantics (docs: shared/MODEL.md,
llama.cpp's qwen35moe.cpp): norms are plain `* w`, linear-attention value head j uses key head
j % n_k, ssm_a is used as stored, attn_q is split per head into query | gate. It shares nothing
with golden.py's GGUF->HF weight mapping, so a mapping mistake (value-head order, q/gate
interleave, norm +1, A_log, conv layout, expert layout) shows up as a mismatch. It runs the
prompt followed by the decode tokens as one sequence, with the delta rule as a plain per-token
recurrence, and compares every layer's residual stream and the logits with the HF prefill and
the HF cached decode steps.

`--mutations` also re-runs the HF side with deliberate mapping mistakes to show they are caught.

Usage: check.py MODEL.gguf [--mutations]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import golden as G


# ----------------------------------------------------------------------------------------------
# Independent numpy forward pass (float64), GGUF semantics
# ----------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def l2_normalize(x, eps=1e-6):
    # transformers' l2norm: x * rsqrt(sum(x^2) + eps). llama.cpp: x / max(||x||, eps) (differs ~eps/||x||^2)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def delta_net(a: G.Arch, g: dict, b: str, x: np.ndarray) -> np.ndarray:
    T = x.shape[0]
    n_k, n_v = a.linear_num_key_heads, a.linear_num_value_heads
    dk, dv = a.linear_key_head_dim, a.linear_value_head_dim
    qkv = x @ g[b + "attn_qkv.weight"].T  # [T, 2*n_k*dk + n_v*dv]
    z = (x @ g[b + "attn_gate.weight"].T).reshape(T, n_v, dv)
    beta = sigmoid(x @ g[b + "ssm_beta.weight"].T)  # [T, n_v]
    alpha = x @ g[b + "ssm_alpha.weight"].T
    gdecay = g[b + "ssm_a"] * softplus(alpha + g[b + "ssm_dt.bias"])  # log of the per-step decay

    w = g[b + "ssm_conv1d.weight"]  # [channels, kernel]; kernel tap K-1 multiplies the current token
    K = w.shape[1]
    conv = np.zeros_like(qkv)
    for t in range(T):
        for k in range(K):
            src = t - (K - 1) + k
            if src >= 0:
                conv[t] += w[:, k] * qkv[src]
    conv = silu(conv)
    q = conv[:, : n_k * dk].reshape(T, n_k, dk)
    kk = conv[:, n_k * dk: 2 * n_k * dk].reshape(T, n_k, dk)
    v = conv[:, 2 * n_k * dk:].reshape(T, n_v, dv)
    q = l2_normalize(q) / np.sqrt(dk)
    kk = l2_normalize(kk)

    out = np.zeros((T, n_v, dv))
    for j in range(n_v):
        kh = j % n_k  # GGUF stores value heads tiled over key heads
        S = np.zeros((dk, dv))
        for t in range(T):
            S = S * np.exp(gdecay[t, j])
            kv = S.T @ kk[t, kh]
            S = S + np.outer(kk[t, kh], beta[t, j] * (v[t, j] - kv))
            out[t, j] = S.T @ q[t, kh]
    out = rms_norm(out, g[b + "ssm_norm.weight"], a.rms_norm_eps) * silu(z)
    return out.reshape(T, n_v * dv) @ g[b + "ssm_out.weight"].T


def rope_neox(x: np.ndarray, pos: np.ndarray, n_rot: int, theta: float) -> np.ndarray:
    half = n_rot // 2
    inv = theta ** (-np.arange(half) * 2.0 / n_rot)
    ang = pos[:, None] * inv[None, :]  # [T, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    x1, x2 = x[..., :half], x[..., half:n_rot]
    y[..., :half] = x1 * cos - x2 * sin
    y[..., half:n_rot] = x2 * cos + x1 * sin
    return y


def attention(a: G.Arch, g: dict, b: str, x: np.ndarray) -> np.ndarray:
    T = x.shape[0]
    H, Hkv, hd = a.num_attention_heads, a.num_key_value_heads, a.head_dim
    qg = (x @ g[b + "attn_q.weight"].T).reshape(T, H, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (x @ g[b + "attn_k.weight"].T).reshape(T, Hkv, hd)
    v = (x @ g[b + "attn_v.weight"].T).reshape(T, Hkv, hd)
    q = rms_norm(q, g[b + "attn_q_norm.weight"], a.rms_norm_eps)
    k = rms_norm(k, g[b + "attn_k_norm.weight"], a.rms_norm_eps)
    pos = np.arange(T, dtype=np.float64)
    q = rope_neox(q, pos, a.rope_dim, a.rope_theta)
    k = rope_neox(k, pos, a.rope_dim, a.rope_theta)
    out = np.zeros((T, H, hd))
    group = H // Hkv
    for h in range(H):
        kh = h // group
        s = (q[:, h] @ k[:, kh].T) / np.sqrt(hd)
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, h] = p @ v[:, kh]
    out = out * sigmoid(gate)
    return out.reshape(T, H * hd) @ g[b + "attn_output.weight"].T


def moe(a: G.Arch, g: dict, b: str, x: np.ndarray) -> np.ndarray:
    logits = x @ g[b + "ffn_gate_inp.weight"].T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if b + "ffn_gate_up_exps.weight" in g:
        gu = g[b + "ffn_gate_up_exps.weight"]
        F = gu.shape[1] // 2
        gate_e, up_e = gu[:, :F], gu[:, F:]
    else:
        gate_e, up_e = g[b + "ffn_gate_exps.weight"], g[b + "ffn_up_exps.weight"]
    down_e = g[b + "ffn_down_exps.weight"]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = np.argsort(-p[t], kind="stable")[: a.num_experts_per_tok]
        wts = p[t, top] / p[t, top].sum()
        for e, wt in zip(top, wts):
            out[t] += wt * (down_e[e] @ (silu(gate_e[e] @ x[t]) * (up_e[e] @ x[t])))
    sh = (silu(x @ g[b + "ffn_gate_shexp.weight"].T) * (x @ g[b + "ffn_up_shexp.weight"].T)) @ g[
        b + "ffn_down_shexp.weight"].T
    sg = sigmoid(x @ g[b + "ffn_gate_inp_shexp.weight"].reshape(-1))
    return out + sg[:, None] * sh


def numpy_forward(a: G.Arch, g: dict, ids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Returns (hidden states [T, D] for index 0..L, logits [T, V])."""
    h = g["token_embd.weight"][ids]
    hidden = [h]
    for i, kind in enumerate(a.layer_types):
        b = f"blk.{i}."
        x = rms_norm(h, g[b + "attn_norm.weight"], a.rms_norm_eps)
        h = h + (delta_net(a, g, b, x) if kind == "linear_attention" else attention(a, g, b, x))
        x = rms_norm(h, g[b + "post_attention_norm.weight"], a.rms_norm_eps)
        h = h + moe(a, g, b, x)
        hidden.append(h)
    out_w = g.get("output.weight", g["token_embd.weight"])
    logits = rms_norm(h, g["output_norm.weight"], a.rms_norm_eps) @ out_w.T
    return hidden, logits


# ----------------------------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------------------------

def rel(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def compare(a: G.Arch, rec: dict, hidden: list[np.ndarray], logits: np.ndarray) -> dict[str, float]:
    T = G.PROMPT_LEN
    errs = {}
    for i in range(len(hidden)):
        errs[f"hidden.{i}"] = rel(rec[f"hidden.{i}"], hidden[i][:T])
    errs["logits"] = rel(rec["logits"], logits[T - 1])
    for j in range(G.DECODE_STEPS):
        errs[f"decode.{j}.hidden"] = max(
            rel(rec[f"decode.{j}.hidden.{i}"], hidden[i][T + j]) for i in range(len(hidden)))
        errs[f"decode.{j}.logits"] = rel(rec[f"decode.{j}.logits"], logits[T + j])
    return errs


def run_hf(a: G.Arch, sd: dict, dtype_name: str, strict: bool, prompt, decode) -> dict:
    import torch

    dtype = torch.float64 if dtype_name == "float64" else torch.float32
    with G.strict_float64(strict):
        model = G.build_model(a, sd, dtype)
        rec, _ = G.run_model(model, prompt, decode)
    return rec


MUTATIONS = {
    "value heads left in GGUF (tiled) order": "no_untile",
    "norms not shifted by -1": "no_norm_shift",
    "ssm_norm shifted by -1 too": "ssm_norm_shift",
    "attn_q read as [all query | all gate]": "q_blocked",
    "A_log = ssm_a (no log(-x))": "a_log_raw",
    "conv taps reversed": "conv_reversed",
    "experts gate/up swapped": "gate_up_swapped",
}


def mutate(a: G.Arch, g: dict, kind: str) -> dict:
    """golden.gguf_to_hf_state_dict with one deliberate mistake."""
    sd = G.gguf_to_hf_state_dict(a, g)
    n_k, n_v = a.linear_num_key_heads, a.linear_num_value_heads
    for i, lt in enumerate(a.layer_types):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        if lt == "linear_attention":
            la = h + "linear_attn."
            if kind == "no_untile":
                sd[la + "in_proj_qkv.weight"] = g[b + "attn_qkv.weight"]
                sd[la + "in_proj_z.weight"] = g[b + "attn_gate.weight"]
                sd[la + "in_proj_b.weight"] = g[b + "ssm_beta.weight"]
                sd[la + "in_proj_a.weight"] = g[b + "ssm_alpha.weight"]
                sd[la + "dt_bias"] = g[b + "ssm_dt.bias"]
                sd[la + "A_log"] = np.log(-g[b + "ssm_a"])
                sd[la + "conv1d.weight"] = g[b + "ssm_conv1d.weight"][:, None, :]
                sd[la + "out_proj.weight"] = g[b + "ssm_out.weight"]
            elif kind == "ssm_norm_shift":
                sd[la + "norm.weight"] = sd[la + "norm.weight"] - 1.0
            elif kind == "a_log_raw":
                sd[la + "A_log"] = G.untile_v_heads(g[b + "ssm_a"], 0, n_k, n_v, 1)
            elif kind == "conv_reversed":
                sd[la + "conv1d.weight"] = sd[la + "conv1d.weight"][..., ::-1].copy()
        else:
            if kind == "q_blocked":
                w = g[b + "attn_q.weight"]
                H, hd = a.num_attention_heads, a.head_dim
                q, gate = w[: H * hd].reshape(H, hd, -1), w[H * hd:].reshape(H, hd, -1)
                sd[h + "self_attn.q_proj.weight"] = np.concatenate([q, gate], axis=1).reshape(w.shape)
        if kind == "no_norm_shift":
            for n in ("input_layernorm", "post_attention_layernorm"):
                sd[h + n + ".weight"] = sd[h + n + ".weight"] + 1.0
        if kind == "gate_up_swapped":
            gu = sd[h + "mlp.experts.gate_up_proj"]
            F = gu.shape[1] // 2
            sd[h + "mlp.experts.gate_up_proj"] = np.concatenate([gu[:, F:], gu[:, :F]], axis=1)
    return sd


def check_against_converter(llama_cpp_dir: Path) -> bool:
    """untile_v_heads must invert the converter's own _reorder_v_heads (conversion/qwen.py)."""
    import torch

    sys.path.insert(0, str(llama_cpp_dir))
    sys.path.insert(1, str(llama_cpp_dir / "gguf-py"))
    from conversion.qwen import _LinearAttentionVReorderBase as Reorder

    ok = True
    for n_k, n_v, hd in [(2, 4, 64), (2, 8, 64), (16, 32, 128), (3, 6, 5)]:
        for axis in (0, 1):
            shape = (n_v * hd, 7) if axis == 0 else (5, n_v * hd)
            x = torch.randn(*shape, dtype=torch.float64)
            y = Reorder._reorder_v_heads(x, axis, n_k, n_v // n_k, hd)
            same = np.array_equal(G.untile_v_heads(y.numpy(), axis, n_k, n_v, hd), x.numpy())
            ok &= same
            print(f"    converter round trip n_k={n_k} n_v={n_v} head={hd} axis={axis}: {'ok' if same else 'MISMATCH'}")
    return ok


def check_golden_file(path: Path, model: Path, a: G.Arch, hidden, logits) -> bool:
    """A written golden must come from `model` and hold the numpy results up to F32 rounding."""
    import gguf

    r = gguf.GGUFReader(str(path))
    src = r.fields["golden.source_sha256"].contents()
    ok = src == G.sha256(model)
    print(f"golden {path}: source sha256 {'matches' if ok else 'DIFFERS from'} {model}")
    t = {x.name: np.asarray(x.data) for x in r.tensors}
    prompt, decode = G.token_ids(a.vocab_size)
    ok &= np.array_equal(t["prompt_ids"], prompt) and np.array_equal(t["decode_ids"], decode)
    T, worst = G.PROMPT_LEN, 0.0
    for i in range(len(hidden)):
        worst = max(worst, rel(t[f"hidden.{i}"], hidden[i][:T]))
        for j in range(G.DECODE_STEPS):
            worst = max(worst, rel(t[f"decode.{j}.hidden.{i}"], hidden[i][T + j]))
    worst = max([worst, rel(t["logits"], logits[T - 1])]
                + [rel(t[f"decode.{j}.logits"], logits[T + j]) for j in range(G.DECODE_STEPS)])
    ok &= worst < 1e-6
    print(f"golden {path}: {len(t)} tensors, max rel err vs numpy {worst:.3e} {'ok' if worst < 1e-6 else 'TOO LARGE'}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--mutations", action="store_true", help="also show that mapping mistakes are caught")
    ap.add_argument("--tol", type=float, default=1e-10, help="max relative error for the strict float64 run")
    ap.add_argument("--converter", type=Path, metavar="LLAMA_CPP_DIR",
                    help="llama.cpp source dir holding conversion/qwen.py: check untile_v_heads against it")
    ap.add_argument("--golden", type=Path, help="also check a golden file written by golden.py from MODEL")
    args = ap.parse_args(argv)

    ok = True
    if args.converter:
        ok &= check_against_converter(args.converter)

    meta, g, _ = G.load_gguf(args.model)
    a = G.derive_arch(meta, g)
    prompt, decode = G.token_ids(a.vocab_size)
    ids = np.concatenate([prompt, decode]).astype(np.int64)
    hidden, logits = numpy_forward(a, g, ids)
    sd = G.gguf_to_hf_state_dict(a, g)
    if args.golden:
        ok &= check_golden_file(args.golden, args.model, a, hidden, logits)

    runs = [("float64", True), ("float64", False), ("float32", False)]
    for dtype_name, strict in runs:
        rec = run_hf(a, sd, dtype_name, strict, prompt, decode)
        errs = compare(a, rec, hidden, logits)
        label = dtype_name + (" strict" if strict else " hf-native-casts" if dtype_name == "float64" else "")
        worst = max(errs.values())
        print(f"[{label}] max rel err {worst:.3e}")
        for name, e in errs.items():
            print(f"    {name:<20} {e:.3e}")
        if strict and worst > args.tol:
            ok = False
            print(f"FAIL: strict float64 run exceeds tol {args.tol}")

    if args.mutations:
        print("mutations (each must give a large error):")
        for desc, kind in MUTATIONS.items():
            rec = run_hf(a, mutate(a, g, kind), "float64", True, prompt, decode)
            worst = max(compare(a, rec, hidden, logits).values())
            caught = worst > 1e-3
            ok &= caught
            print(f"    {desc:<42} max rel err {worst:.3e} {'caught' if caught else 'NOT CAUGHT'}")

    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
