#!/usr/bin/env python3
"""ref_forward: an independent llama forward pass in numpy, the oracle of the engine's CPU backend.

It shares no code with the engine: the GGUF file is parsed and dequantized by the PyPI `gguf`
package (llama.cpp's own Python reader), and the math is written from the llama definition in
float64: RMSNorm, RoPE on adjacent pairs (the GGUF convention), grouped-query causal attention,
SwiGLU.

    ref_forward.py MODEL.gguf TOKENS.txt OUT.f32 [--top2 OUT.txt]

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
    return hp, W, "output.weight" in tensors


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


def forward(hp, W, untied, tokens):
    T = len(tokens)
    hd, H, KV = hp["head_dim"], hp["heads"], hp["kv_heads"]
    emb = W("token_embd.weight")
    x = emb[tokens]
    pos = np.arange(T, dtype=np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(hp["layers"]):
        p = f"blk.{l}."
        h = rmsnorm(x, W(p + "attn_norm.weight"), hp["eps"])
        q = (h @ W(p + "attn_q.weight").T).reshape(T, H, hd)
        k = (h @ W(p + "attn_k.weight").T).reshape(T, KV, hd)
        v = (h @ W(p + "attn_v.weight").T).reshape(T, KV, hd)
        q, k = rope(q, pos, hp["rope_dim"], hp["base"]), rope(k, pos, hp["rope_dim"], hp["base"])
        rep = H // KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, H * hd)
        x = x + o @ W(p + "attn_output.weight").T
        h = rmsnorm(x, W(p + "ffn_norm.weight"), hp["eps"])
        g, u = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
    x = rmsnorm(x, W("output_norm.weight"), hp["eps"])
    out = W("output.weight") if untied else emb
    return x @ out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("out")
    ap.add_argument("--top2")
    a = ap.parse_args()
    tokens = np.array([int(t) for t in open(a.tokens).read().split()], dtype=np.int64)
    hp, W, untied = load(a.model)
    logits = forward(hp, W, untied, tokens)
    if a.out != "-":
        logits.astype("<f4").tofile(a.out)
    if a.top2:
        with open(a.top2, "w") as f:
            for row in logits:
                i2 = np.argsort(-row, kind="stable")[:2]
                f.write(f"{i2[0]} {i2[1]} {row[i2[0]]:.9g} {row[i2[1]]:.9g}\n")


if __name__ == "__main__":
    main()
