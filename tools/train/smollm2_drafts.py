#!/usr/bin/env python3
"""smollm2_drafts.py: draft models for SmolLM2-135M's 49,152-token vocabulary, distilled (#11).

    /usr/bin/python3 tools/train/smollm2_drafts.py --teacher models/cache/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --data build/distill/teacher.jsonl --out models [--minutes 8] [--specialist-minutes 3]

Sequence-level distillation: the data is SmolLM2's own greedy continuations (smollm2_data.py), and
a draft learns to predict each of the teacher's tokens from the tokens before it: exactly what
greedy verification keeps. The prompt's tokens (human text) are context only: the loss is
on the teacher's tokens, and the output projection (most of the training time) is computed there
alone.

Sizing. A draft's cost per token is dominated by its tied 49,152 x dim embedding, which is also the
output projection: at dim 128 that is 6.3 M multiply-adds and 6.7 MB in Q8_0 against ~1 M and 2 MB
(F16) for everything else at 4 layers, so layers are cheap and the width is what costs. The
embedding starts from SmolLM2's own (dequantized) projected on its top `dim` principal directions,
so the draft begins with the teacher's notion of which tokens are alike.

The family: `smollm2-draft` (general, every domain) is trained first; each specialist starts from
it and trains on its own mixture for a while more (cheaper than from scratch, and better than it on
little data). Writes OUT/{name}.gguf with SmolLM2's tokenizer and metadata (every tokenizer key
copied, so the vocabulary check at start-up passes), the embedding in Q8_0, the matrices in F16 and
the norms in F32, and adds each model's recipe, data, time and sha256 to OUT/manifest.json.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gguf  # noqa: E402
from gguf import GGMLQuantizationType  # noqa: E402
from gguf_copy import new_writer  # noqa: E402
from ref_tokenize import BPE  # noqa: E402
from smollm2_prompts import DOMAINS, encode_chat  # noqa: E402
from train import Llama, load_weights  # noqa: E402

Q8_0 = GGMLQuantizationType.Q8_0
VOCAB = 49152
MAX_LEN = 256
PROMPT_WEIGHT = 0.0  # the prompt is context only: the output projection, most of the cost, skips it
# name, dim, layers, heads, kv heads, ff, mixture over DOMAINS (kjv, web, devil, chat), start from
FAMILY = [
    ("smollm2-draft", 128, 4, 4, 2, 512, (1, 1, 1, 1), None),
    ("smollm2-draft-bible", 128, 4, 4, 2, 512, (1, 1, 0.1, 0.1), "smollm2-draft"),
    ("smollm2-draft-chat", 128, 4, 4, 2, 512, (0.1, 0.1, 0.1, 1), "smollm2-draft"),
]


def teacher_embedding(reader, dim):
    """SmolLM2's token embedding [VOCAB, 576] projected on its top dim principal directions."""
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    e = gguf.quants.dequantize(t.data, t.tensor_type).reshape(VOCAB, -1).astype(np.float32)
    e = torch.from_numpy(e)
    _, _, v = torch.linalg.svd(e - e.mean(0), full_matrices=False)
    p = e @ v[:dim].T
    return p * (0.05 / p.std())


def load_data(path, bpe, eos, end_of_turn, log):
    """Token ids and per-token loss weights of every teacher continuation, per domain."""
    seqs = {d: [] for d in DOMAINS}
    mismatch = 0
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if "messages" in r:
            prompt = encode_chat(bpe, r["messages"])
        else:
            prompt = bpe.encode(r["prompt"])
        gen = bpe.encode(r["text"]) if r["text"] else []
        mismatch += len(prompt) != r["prompt_tokens"]
        if r["completion_tokens"] > len(gen):  # the teacher ended its text: it chose the end token
            gen.append(end_of_turn if "messages" in r else eos)
        ids = (prompt + gen)[:MAX_LEN + 1]
        w = ([PROMPT_WEIGHT] * len(prompt) + [1.0] * len(gen))[1:MAX_LEN + 1]
        if len(ids) >= 2:
            seqs[r["domain"]].append((np.array(ids, dtype=np.int64), np.array(w, dtype=np.float32)))
    log("data: " + ", ".join(f"{d} {len(s)} sequences {sum(len(x) for x, _ in s)} tokens" for d, s in seqs.items())
        + f"; prompts tokenized unlike the server: {mismatch}")
    return seqs


def batches(seqs, mixture, batch_tokens, rng):
    """Batches of whole sequences (padded at the end, the padding weighing 0), domains drawn by mixture."""
    probs = np.array(mixture, dtype=np.float64)
    probs /= probs.sum()
    while True:
        picked, tokens = [], 0
        while tokens < batch_tokens:
            d = DOMAINS[rng.choice(len(DOMAINS), p=probs)]
            s = seqs[d][rng.integers(len(seqs[d]))]
            picked.append(s)
            tokens += len(s[0])
        T = max(len(x) for x, _ in picked)
        x = np.zeros((len(picked), T), dtype=np.int64)
        w = np.zeros((len(picked), T - 1), dtype=np.float32)
        for i, (ids, wt) in enumerate(picked):
            x[i, :len(ids)] = ids
            w[i, :len(wt)] = wt
        yield torch.from_numpy(x), torch.from_numpy(w)


def make_model(spec, emb):
    name, dim, layers, heads, kv, ff, _, _ = spec
    m = Llama(dim, layers, heads, kv, ff, vocab=VOCAB)
    m.register_buffer("mask", torch.triu(torch.full((MAX_LEN, MAX_LEN), float("-inf")), 1), persistent=False)
    with torch.no_grad():
        m.emb.weight.copy_(emb)
    return m


def hidden(model, x):
    """The draft's normalized last hidden states [B, T, dim]: its logits are these times emb^T."""
    h = model.emb(x)
    for L in model.layers:
        h = model.block(L, h)
    return model.rms(h, model.out_norm)


def train(model, seqs, mixture, budget_s, lr, seed, log, name):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    it = batches(seqs, mixture, 4096, rng)
    t0, seen, step, ema = time.time(), 0, 0, None
    model.train()
    while True:
        frac = min(1.0, (time.time() - t0) / budget_s)
        scale = min(1.0, (step + 1) / 10) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        x, w = next(it)
        w = w.reshape(-1)
        keep = w > 0  # the output projection only where the loss counts
        h = hidden(model, x[:, :-1]).reshape(-1, model.dim)[keep]
        nll = F.cross_entropy(h @ model.emb.weight.T, x[:, 1:].reshape(-1)[keep], reduction="none")
        loss = (nll * w[keep]).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        seen += int(keep.sum())
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 50 == 0:
            log(f"{name} step {step} loss {ema:.3f} {seen / (time.time() - t0):.0f} tok/s")
        step += 1
        if frac >= 1.0:
            break
    model.eval()
    return seen, step


@torch.no_grad()
def agreement(model, seqs):
    """Teacher-forced top-1 agreement with the teacher's own tokens, per domain."""
    out = {}
    for d in DOMAINS:
        hit = n = 0
        for ids, w in seqs[d]:
            pred = (hidden(model, torch.from_numpy(ids[None, :-1]))[0] @ model.emb.weight.T).argmax(-1).numpy()
            mask = w == 1.0
            hit += int((pred[mask] == ids[1:][mask]).sum())
            n += int(mask.sum())
        out[d] = round(hit / max(n, 1), 3)
    return out


def export(model, reader, path, name):
    """OUT/name.gguf: SmolLM2's metadata and tokenizer, the draft's shape, Q8_0 embedding, F16 matrices."""
    own = {"general.name": name, "general.file_type": int(gguf.LlamaFileType.MOSTLY_F16),
           "llama.block_count": len(model.layers), "llama.context_length": MAX_LEN * 8,
           "llama.embedding_length": model.dim, "llama.feed_forward_length": model.layers[0].gate.out_features,
           "llama.attention.head_count": model.heads, "llama.attention.head_count_kv": model.kv_heads,
           "llama.rope.freq_base": 10000.0, "llama.rope.dimension_count": model.hd,
           "llama.attention.layer_norm_rms_epsilon": 1e-5}
    keep = lambda key: not key.startswith("general.") or key in own or key == "general.license"
    writer = new_writer(reader, path, own, keep)
    T = lambda t: t.detach().float().numpy()
    emb = T(model.emb.weight)
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(emb, Q8_0), raw_dtype=Q8_0)
    for i, L in enumerate(model.layers):
        for g, t in (("attn_norm", L.attn_norm), ("attn_q", L.q.weight), ("attn_k", L.k.weight),
                     ("attn_v", L.v.weight), ("attn_output", L.o.weight), ("ffn_norm", L.ffn_norm),
                     ("ffn_gate", L.gate.weight), ("ffn_up", L.up.weight), ("ffn_down", L.down.weight)):
            writer.add_tensor(f"blk.{i}.{g}.weight", T(t) if t.dim() == 1 else T(t).astype(np.float16))
    writer.add_tensor("output_norm.weight", T(model.out_norm))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=8, help="the general draft's training time")
    ap.add_argument("--specialist-minutes", type=float, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="train only this model (a specialist needs its base in OUT)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    log = lambda m: print(time.strftime("%H:%M:%S"), m, flush=True)
    reader = gguf.GGUFReader(a.teacher)
    bpe = BPE(a.teacher)
    eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    end_of_turn = bpe.tokens.index("<|im_end|>")
    seqs = load_data(a.data, bpe, eos, end_of_turn, log)
    n_held = {d: min(100, len(s) // 10) for d, s in seqs.items()}  # the last ones: never trained on
    held = {d: s[len(s) - n_held[d]:] for d, s in seqs.items()}
    train_seqs = {d: s[:len(s) - n_held[d]] for d, s in seqs.items()}
    n_data = sum(len(s) for s in seqs.values())
    manifest_path = os.path.join(a.out, "manifest.json")
    manifest = json.load(open(manifest_path))
    models = {}
    for i, spec in enumerate(FAMILY):
        name, dim, layers, heads, kv, ff, mixture, base = spec
        if a.only and name != a.only:
            continue
        t0 = time.time()
        if base is None:
            model = make_model(spec, teacher_embedding(reader, dim))
            budget, lr = a.minutes * 60, 3e-3
        else:
            model = models.get(base) or load_draft(os.path.join(a.out, f"{base}.gguf"), spec)
            model = clone(model, spec)
            budget, lr = a.specialist_minutes * 60, 1e-3
        seen, steps = train(model, train_seqs, mixture, budget, lr, 2000 + i, log, name)
        models[name] = model
        path = os.path.join(a.out, f"{name}.gguf")
        export(model, reader, path, f"minions-{name}")
        agree = agreement(model, held)
        log(f"{name}: teacher-forced agreement on held-out continuations {agree}")
        manifest["models"][name] = {
            "file": f"{name}.gguf", "role": "draft", "target": "SmolLM2-135M-Instruct",
            "parameters": sum(p.numel() for p in model.parameters()),
            "dim": dim, "layers": layers, "heads": heads, "kv_heads": kv, "ff": ff,
            "mixture": dict(zip(DOMAINS, mixture)), "starts_from": base or "SmolLM2's embedding, top principal directions",
            "recipe": "sequence-level distillation: cross-entropy on SmolLM2-135M-Instruct Q4_1's greedy "
                      "continuations (tools/train/smollm2_data.py, smollm2_drafts.py), prompt tokens weighted "
                      f"{PROMPT_WEIGHT} (context only), AdamW lr {lr} cosine, batches of ~4,096 tokens",
            "data": f"{n_data} greedy teacher continuations of up to 96 tokens: windows of the kjv, web and "
                    "devil training text and template chat instructions (the last 10%, at most 100, of each "
                    "domain held out for the agreement figure)",
            "training_tokens": seen, "steps": steps, "training_seconds": round(time.time() - t0),
            "threads": a.threads, "distilled_from": "SmolLM2-135M-Instruct",
            "teacher_forced_agreement": agree,
            "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        }
        json.dump(manifest, open(manifest_path, "w"), indent=1)
        log(f"{name}: {seen} tokens, {steps} steps, {time.time() - t0:.0f} s -> {path}")


def clone(model, spec):
    m = make_model(spec, model.emb.weight.detach())
    m.load_state_dict(model.state_dict(), strict=False)
    return m


def load_draft(path, spec):
    return load_weights(make_model(spec, torch.zeros(VOCAB, spec[1])), path)


if __name__ == "__main__":
    main()
