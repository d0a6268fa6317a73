#!/usr/bin/env python3
"""ref_forward: an independent llama forward pass in numpy, the oracle of the engine's CPU backend.

It shares no code with the engine: the GGUF file is parsed and dequantized by the PyPI `gguf`
package (llama.cpp's own Python reader), and the math is written from the llama definition in
float64: RMSNorm, RoPE on adjacent pairs (the GGUF convention), grouped-query causal attention,
SwiGLU.

    ref_forward.py MODEL.gguf TOKENS.txt OUT.f32 [--top2 OUT.txt]

With --q16-activations, the input of every product with a quantized weight (Q8_0, Q4_0, Q4_1) is
first rounded as the engine's integer kernels round it: per block of 32, d = max|x| / 32767 and
q = round-half-even(x / d) in float32; F32/F16 products stay exact.

TOKENS.txt holds whitespace-separated token ids (one sequence, teacher-forced). OUT.f32 receives
the logits of every position as little-endian float32, [n_tokens][n_vocab]. With --top2, each line
of OUT.txt is "best second best_logit second_logit" for the position, for top-1 agreement checks
without storing full logits.
"""
import argparse

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def load(path):
    r = GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}

    def W(name):
        t = tensors[name]
        a = dequantize(t.data, t.tensor_type)
        return np.asarray(a, dtype=np.float64).reshape([int(n) for n in reversed(t.shape.tolist())])

    def is_quantized(name):
        return tensors[name].tensor_type.name in ("Q8_0", "Q4_0", "Q4_1")

    hp = dict(
        dim=field(r, "llama.embedding_length"),
        layers=field(r, "llama.block_count"),
        heads=field(r, "llama.attention.head_count"),
        kv_heads=field(r, "llama.attention.head_count_kv", field(r, "llama.attention.head_count")),
        eps=field(r, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        base=field(r, "llama.rope.freq_base", 10000.0),
    )
    hp["head_dim"] = hp["dim"] // hp["heads"]
    hp["rope_dim"] = field(r, "llama.rope.dimension_count", hp["head_dim"])
    return hp, W, is_quantized, "output.weight" in tensors


def q16_round(x):
    """x as the engine's 16-bit activations represent it (float32 arithmetic, like the C code)."""
    x32 = np.asarray(x, dtype=np.float32)
    b = x32.reshape(*x32.shape[:-1], -1, 32)
    d = (np.abs(b).max(axis=-1, keepdims=True) / np.float32(32767)).astype(np.float32)
    tiny = np.finfo(np.float32).tiny  # below it 1 / d is not finite: the engine quantizes to 0
    inv = np.where(d >= tiny, np.float32(1) / np.where(d >= tiny, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((b * inv).astype(np.float32)), -32767, 32767)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, rope_dim, base):
    # x: [T, heads, head_dim]; rotate pairs (2i, 2i+1) of the first rope_dim dims
    inv = base ** (-np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    a, b = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
    out[..., 0:rope_dim:2] = a * c - b * s
    out[..., 1:rope_dim:2] = a * s + b * c
    return out


def forward(hp, W, is_quantized, untied, tokens, q16=False):
    def mm(x, name):
        """x W^T, with x rounded to 16 bits first where the engine does that."""
        return (q16_round(x) if q16 and is_quantized(name) else x) @ W(name).T

    T = len(tokens)
    hd, H, KV = hp["head_dim"], hp["heads"], hp["kv_heads"]
    emb = W("token_embd.weight")
    x = emb[tokens]
    pos = np.arange(T, dtype=np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(hp["layers"]):
        p = f"blk.{l}."
        h = rmsnorm(x, W(p + "attn_norm.weight"), hp["eps"])
        q = mm(h, p + "attn_q.weight").reshape(T, H, hd)
        k = mm(h, p + "attn_k.weight").reshape(T, KV, hd)
        v = mm(h, p + "attn_v.weight").reshape(T, KV, hd)
        q, k = rope(q, pos, hp["rope_dim"], hp["base"]), rope(k, pos, hp["rope_dim"], hp["base"])
        rep = H // KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, H * hd)
        x = x + mm(o, p + "attn_output.weight")
        h = rmsnorm(x, W(p + "ffn_norm.weight"), hp["eps"])
        g, u = mm(h, p + "ffn_gate.weight"), mm(h, p + "ffn_up.weight")
        x = x + mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight")
    x = rmsnorm(x, W("output_norm.weight"), hp["eps"])
    return mm(x, "output.weight" if untied else "token_embd.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("out")
    ap.add_argument("--top2")
    ap.add_argument("--q16-activations", action="store_true", help="round activations as the integer kernels do")
    a = ap.parse_args()
    tokens = np.array([int(t) for t in open(a.tokens).read().split()], dtype=np.int64)
    hp, W, is_quantized, untied = load(a.model)
    logits = forward(hp, W, is_quantized, untied, tokens, a.q16_activations)
    if a.out != "-":
        logits.astype("<f4").tofile(a.out)
    if a.top2:
        with open(a.top2, "w") as f:
            for row in logits:
                i2 = np.argsort(-row, kind="stable")[:2]
                f.write(f"{i2[0]} {i2[1]} {row[i2[0]]:.9g} {row[i2[1]]:.9g}\n")


if __name__ == "__main__":
    main()
