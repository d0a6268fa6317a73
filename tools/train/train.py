#!/usr/bin/env python3
"""train.py: the bundled model family - one tokenizer, a target and three specialist drafts.

    /usr/bin/python3 tools/train/train.py --corpora DIR --out models [--minutes-target 25] [--draft-tokens N]

Needs Debian's python3-torch (with libopenblas0-openmp; the reference BLAS is ~20x slower) and
corpora from tools/train/corpora.py. Writes OUT/tokenizer.json, OUT/target.gguf (F32),
OUT/draft-*.gguf (matrices F16, norms F32: a draft's precision only moves what it proposes, and half
the bytes make its passes cheaper; docs/models.md) and OUT/manifest.json. The llama here rotates
adjacent pairs (the GGUF RoPE convention), so weights export as they are. Deterministic for a given
seed and thread count.
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ggufw  # noqa: E402
from ref_tokenize import BPE  # noqa: E402

VOCAB = 2048
SEQ = 128

# name, role, dim, layers, heads, kv heads, ff, corpus mixture (weights of kjv, web, devil)
FAMILY = [
    ("target", "target", 256, 6, 8, 4, 688, (1.0, 1.0, 1.0)),
    ("draft-kjv", "draft", 128, 3, 4, 2, 344, (0.85, 0.10, 0.05)),
    ("draft-web", "draft", 112, 3, 4, 2, 304, (0.10, 0.85, 0.05)),
    ("draft-devil", "draft", 144, 2, 4, 2, 384, (0.20, 0.20, 0.60)),
]
CORPORA = ("kjv", "web", "devil")


class Llama(torch.nn.Module):
    def __init__(self, dim, layers, heads, kv_heads, ff, vocab=VOCAB):
        super().__init__()
        self.dim, self.heads, self.kv_heads, self.hd = dim, heads, kv_heads, dim // heads
        self.emb = torch.nn.Embedding(vocab, dim)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            L = torch.nn.Module()
            L.attn_norm = torch.nn.Parameter(torch.ones(dim))
            L.q = torch.nn.Linear(dim, heads * self.hd, bias=False)
            L.k = torch.nn.Linear(dim, kv_heads * self.hd, bias=False)
            L.v = torch.nn.Linear(dim, kv_heads * self.hd, bias=False)
            L.o = torch.nn.Linear(heads * self.hd, dim, bias=False)
            L.ffn_norm = torch.nn.Parameter(torch.ones(dim))
            L.gate = torch.nn.Linear(dim, ff, bias=False)
            L.up = torch.nn.Linear(dim, ff, bias=False)
            L.down = torch.nn.Linear(ff, dim, bias=False)
            for lin in (L.o, L.down):
                torch.nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))
            self.layers.append(L)
        self.out_norm = torch.nn.Parameter(torch.ones(dim))
        inv = 10000.0 ** (-torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd)
        ang = torch.arange(4096, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1), persistent=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x):  # x [B, T, H, hd]; rotate pairs (2i, 2i+1)
        T = x.shape[1]
        c, s = self.cos[:T][None, :, None, :], self.sin[:T][None, :, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)

    def forward(self, idx):
        x = self.emb(idx)
        for L in self.layers:
            x = self.block(L, x)
        return self.rms(x, self.out_norm) @ self.emb.weight.T  # tied output

    def block(self, L, x):
        """One transformer layer over x [B, T, dim]."""
        B, T, _ = x.shape
        h = self.rms(x, L.attn_norm)
        q = self.rope(L.q(h).view(B, T, self.heads, self.hd))
        k = self.rope(L.k(h).view(B, T, self.kv_heads, self.hd))
        v = L.v(h).view(B, T, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, hd]
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + self.mask[:T, :T]
        a = torch.softmax(att, dim=-1) @ v  # (torch 1.13 has no fused attention)
        x = x + L.o(a.transpose(1, 2).reshape(B, T, -1))
        h = self.rms(x, L.ffn_norm)
        return x + L.down(F.silu(L.gate(h)) * L.up(h))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())


def export(model, path, name, tok, matrices=ggufw.T_F32):
    """The model as GGUF: matrices (embedding, projections) in `matrices`, norms in F32."""
    w = ggufw.llama_writer(name, model.dim, len(model.layers), model.heads, model.kv_heads,
                           model.layers[0].gate.out_features, 1024, VOCAB, tok["tokens"], tok["types"], tok["merges"])
    T = lambda t: t.detach().float().numpy()
    w.add_tensor("token_embd.weight", T(model.emb.weight), matrices)
    for i, L in enumerate(model.layers):
        p = f"blk.{i}."
        for gname, t in (("attn_norm", L.attn_norm), ("attn_q", L.q.weight), ("attn_k", L.k.weight),
                         ("attn_v", L.v.weight), ("attn_output", L.o.weight), ("ffn_norm", L.ffn_norm),
                         ("ffn_gate", L.gate.weight), ("ffn_up", L.up.weight), ("ffn_down", L.down.weight)):
            w.add_tensor(p + gname + ".weight", T(t), matrices if t.dim() >= 2 else ggufw.T_F32)
    w.add_tensor("output_norm.weight", T(model.out_norm), ggufw.T_F32)
    w.write(path)


def vocab_bpe(tokenizer_json):
    """The reference encoder over the family's vocabulary (it reads GGUF, so write a throwaway one)."""
    import tempfile
    tok = json.load(open(tokenizer_json))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "vocab.gguf")
        ggufw.llama_writer("vocab", 64, 1, 1, 1, 64, 64, VOCAB, tok["tokens"], tok["types"], tok["merges"]).write(path)
        return BPE(path)


def encode_corpus(bpe, path):
    """Token ids of a text file, words cached (the corpora repeat words heavily)."""
    cache, ids = {}, []
    text = open(path, encoding="utf-8").read()
    for piece in bpe.pieces(text):
        t = cache.get(piece)
        if t is None:
            t = cache[piece] = bpe.bpe("".join(bpe.b2u[b] for b in piece.encode("utf-8")))
        ids.extend(t)
    return np.array(ids, dtype=np.int64)


def batches(streams, mixture, batch, rng):
    probs = np.array(mixture) / sum(mixture)
    while True:
        xs = []
        for _ in range(batch):
            s = streams[rng.choice(len(streams), p=probs)]
            i = rng.integers(0, len(s) - SEQ - 1)
            xs.append(s[i:i + SEQ + 1])
        yield torch.from_numpy(np.stack(xs))


def load_gguf(path, spec):
    """A Llama with the weights of a GGUF file this tool exported."""
    name, role, dim, layers, heads, kv, ff, _ = spec
    return load_weights(Llama(dim, layers, heads, kv, ff), path).eval()


def load_weights(m, path):
    """Fill the Llama m with the tensors of a GGUF file (F32, F16 or quantized: dequantized)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    t = {x.name: torch.from_numpy(dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
         [int(n) for n in reversed(x.shape.tolist())])) for x in GGUFReader(path).tensors}
    with torch.no_grad():
        m.emb.weight.copy_(t["token_embd.weight"])
        m.out_norm.copy_(t["output_norm.weight"])
        for i, L in enumerate(m.layers):
            p = f"blk.{i}."
            L.attn_norm.copy_(t[p + "attn_norm.weight"])
            L.ffn_norm.copy_(t[p + "ffn_norm.weight"])
            for mod, g in ((L.q, "attn_q"), (L.k, "attn_k"), (L.v, "attn_v"), (L.o, "attn_output"),
                           (L.gate, "ffn_gate"), (L.up, "ffn_up"), (L.down, "ffn_down")):
                mod.weight.copy_(t[p + g + ".weight"])
    return m


def train(spec, streams, budget_tokens, budget_s, seed, log, teacher=None):
    """Next-token training; with a teacher, the loss is the cross-entropy against the teacher's
    distribution instead of the data (distillation: the draft learns to predict what the target
    will say, which is what speculative decoding rewards)."""
    name, role, dim, layers, heads, kv, ff, mixture = spec
    torch.manual_seed(seed)
    model = Llama(dim, layers, heads, kv, ff)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3 if role == "draft" else 2e-3, betas=(0.9, 0.95),
                            weight_decay=0.1)
    batch = 32
    steps = budget_tokens // (batch * SEQ)
    rng = np.random.default_rng(seed)
    it = batches(streams, mixture, batch, rng)
    t0, seen = time.time(), 0
    for step in range(steps):
        lr_scale = min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = g.setdefault("base_lr", g["lr"]) * lr_scale
        xy = next(it)
        logits = model(xy[:, :-1])
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), xy[:, 1:].reshape(-1))
        else:
            with torch.no_grad():
                p = torch.softmax(teacher(xy[:, :-1]), dim=-1)
            loss = -(p * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        seen += batch * SEQ
        if step % 100 == 0 or step == steps - 1:
            log(f"{name} step {step}/{steps} loss {loss.item():.3f} {seen / (time.time() - t0):.0f} tok/s")
        if budget_s and time.time() - t0 > budget_s:
            log(f"{name}: time budget reached at step {step}")
            break
    return model, seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes-target", type=float, default=25)
    ap.add_argument("--target-tokens", type=int, default=3_000_000)
    ap.add_argument("--draft-tokens", type=int, default=1_200_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="train only this model (the tokenizer must exist)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    log = lambda m: print(time.strftime("%H:%M:%S"), m, flush=True)

    tok_path = os.path.join(a.out, "tokenizer.json")
    if not os.path.exists(tok_path):
        text = "\n\n".join(open(os.path.join(a.corpora, f"{c}.train.txt"), encoding="utf-8").read() for c in CORPORA)
        t0 = time.time()
        tokens, types, merges = ggufw.build_vocab(text, VOCAB, "gpt-2")
        json.dump({"tokens": tokens, "types": types, "merges": merges}, open(tok_path, "w"))
        log(f"tokenizer: {len(merges)} merges in {time.time() - t0:.0f} s")
    tok = json.load(open(tok_path))
    bpe = vocab_bpe(tok_path)
    streams = [encode_corpus(bpe, os.path.join(a.corpora, f"{c}.train.txt")) for c in CORPORA]
    log("train tokens: " + ", ".join(f"{c} {len(s)}" for c, s in zip(CORPORA, streams)))

    manifest_path = os.path.join(a.out, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {"models": {}}
    for i, spec in enumerate(FAMILY):
        name, role = spec[0], spec[1]
        if a.only and name != a.only:
            continue
        budget = a.target_tokens if role == "target" else a.draft_tokens
        # drafts distil from the target trained just before them (FAMILY lists it first)
        teacher = load_gguf(os.path.join(a.out, "target.gguf"), FAMILY[0]) if role == "draft" else None
        t0 = time.time()
        model, seen = train(spec, streams, budget, a.minutes_target * 60 if role == "target" else 0, 1000 + i, log,
                            teacher)
        path = os.path.join(a.out, f"{name}.gguf")
        export(model, path, f"minions-{name}", tok, ggufw.T_F16 if role == "draft" else ggufw.T_F32)
        manifest["models"][name] = {
            "file": f"{name}.gguf", "role": role, "parameters": model.n_params(),
            "dim": spec[2], "layers": spec[3], "heads": spec[4], "kv_heads": spec[5], "ff": spec[6],
            "mixture": dict(zip(CORPORA, spec[7])), "training_tokens": seen,
            "training_seconds": round(time.time() - t0), "threads": a.threads,
            "distilled_from": "target" if teacher is not None else None,
            "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        }
        json.dump(manifest, open(manifest_path, "w"), indent=1)
        log(f"{name}: {model.n_params()} parameters, {seen} tokens, {time.time() - t0:.0f} s -> {path}")


if __name__ == "__main__":
    main()
