#!/usr/bin/env python3
"""evaluate.py: measure the bundled family and write the tables of docs/models.md.

    .venv/bin/python tools/train/evaluate.py --models models --corpora DIR --prompts prompts [--n-prompts 100]

For every model and corpus: held-out loss (nats/token). For every draft and corpus: teacher-forced
greedy agreement with the target, and greedy speculative decoding with s = 4 simulated on the
corpus's prompt set (the target's 64-token greedy continuation is what any lossless scheme must
produce, so each step the draft rolls out 4 tokens from the true prefix; the accepted length is its
longest agreeing prefix and the target adds one token). The same for a weighted-majority vote of
the three drafts with equal weights: their proposals form a token tree and the walk from the root
takes, at each level, the child with the largest summed weight (ties: the lower token id). Also the
fraction of the target's continuations that repeat an 8-gram (a fluency signal).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ref_tokenize import BPE  # noqa: E402
from train import CORPORA, FAMILY, SEQ, load_gguf as load  # noqa: E402

S = 4
GEN = 64


def windows(ids, n):
    return [ids[i:i + SEQ + 1] for i in range(0, min(len(ids), n) - SEQ - 1, SEQ)]


@torch.no_grad()
def loss_and_argmax(model, ids, n_tokens):
    total, count, preds = 0.0, 0, []
    for w in windows(ids, n_tokens):
        x = torch.tensor(w)[None]
        logits = model(x[:, :-1])[0]
        total += F.cross_entropy(logits, x[0, 1:], reduction="sum").item()
        count += len(w) - 1
        preds.append(logits.argmax(-1).numpy())
    return total / count, np.concatenate(preds)


@torch.no_grad()
def greedy(model, prefix, n):
    out = list(prefix)
    for _ in range(n):
        out.append(int(model(torch.tensor(out[-SEQ:])[None])[0, -1].argmax()))
    return out[len(prefix):]


def vote(proposals, weights):
    """Walk the token tree of the proposals: at each level the child with the largest summed weight."""
    path, alive = [], list(range(len(proposals)))
    for level in range(S):
        score = {}
        for d in alive:
            tok = proposals[d][level]
            score[tok] = score.get(tok, 0.0) + weights[d]
        best = min(score, key=lambda t: (-score[t], t))
        path.append(best)
        alive = [d for d in alive if proposals[d][level] == best]
    return path


def rollouts(draft, prompt, target_cont):
    """The draft's greedy 4-token proposal from every position of the target's continuation."""
    return [greedy(draft, prompt + target_cont[:pos], S) for pos in range(len(target_cont))]


def simulate(proposals, weights, target_cont):
    """Mean accepted draft tokens per verification step; proposals[d][pos] is draft d's rollout."""
    pos, steps, accepted = 0, 0, 0
    while pos < len(target_cont):
        props = [p[pos] for p in proposals]
        path = props[0] if len(props) == 1 else vote(props, weights)
        k = 0
        while k < S and pos + k < len(target_cont) and path[k] == target_cont[pos + k]:
            k += 1
        accepted += k
        steps += 1
        pos += k + 1
    return accepted / steps


def repeats_8gram(toks):
    grams = [tuple(toks[i:i + 8]) for i in range(len(toks) - 7)]
    return len(grams) != len(set(grams))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--n-prompts", type=int, default=100)
    ap.add_argument("--eval-tokens", type=int, default=30000)
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    torch.set_num_threads(2)
    models = {spec[0]: load(os.path.join(a.models, f"{spec[0]}.gguf"), spec) for spec in FAMILY}
    bpe = BPE(os.path.join(a.models, "target.gguf"))
    drafts = [n for n in models if n != "target"]
    res = {"loss": {}, "agreement": {}, "accepted": {}, "fluency": {}}
    for c in CORPORA:
        ids = bpe.encode(open(os.path.join(a.corpora, f"{c}.heldout.txt"), encoding="utf-8").read())
        preds = {}
        for n, m in models.items():
            res["loss"].setdefault(n, {})[c], preds[n] = loss_and_argmax(m, ids, a.eval_tokens)
        for d in drafts:
            res["agreement"].setdefault(d, {})[c] = float((preds[d] == preds["target"]).mean())
        prompts = [json.loads(l)["prompt"] for l in open(os.path.join(a.prompts, f"{c}.jsonl"))][:a.n_prompts]
        acc = {d: [] for d in drafts + ["vote"]}
        rep = 0
        for p in prompts:
            pt = bpe.encode(p)
            cont = greedy(models["target"], pt, GEN)
            rep += repeats_8gram(cont)
            props = {d: rollouts(models[d], pt, cont) for d in drafts}
            for d in drafts:
                acc[d].append(simulate([props[d]], [1.0], cont))
            acc["vote"].append(simulate([props[d] for d in drafts], [1.0] * len(drafts), cont))
        for k, v in acc.items():
            res["accepted"].setdefault(k, {})[c] = float(np.mean(v))
        res["fluency"][c] = rep / len(prompts)
        print(c, json.dumps({k: {n: v.get(c) for n, v in res[k].items()} if k != "fluency" else v[c]
                             for k, v in res.items()}), flush=True)
    out = json.dumps(res, indent=1)
    if a.out == "-":
        print(out)
    else:
        open(a.out, "w").write(out + "\n")


if __name__ == "__main__":
    main()
