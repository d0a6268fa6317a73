#!/usr/bin/env python3
"""prompts.py: the kjv, web and devil prompt sets, from held-out text only.

    .venv/bin/python tools/train/prompts.py --corpora DIR --models models --out prompts

Each held-out unit is cut at word boundaries into consecutive windows whose token counts are drawn
(seeded) from a per-corpus range inside 8-64 tokens; then 250 windows spread evenly over the corpus
are kept. One JSON object per line: {"prompt": "...", "tokens": N}.
"""
import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import CORPORA, vocab_bpe  # noqa: E402

RANGES = {"kjv": (16, 56), "web": (16, 56), "devil": (8, 24)}
PER_SET = 250


def windows(bpe, unit, lo, hi, rng):
    words = re.findall(r"\S+\s*", unit)
    out, cur, want = [], "", rng.randint(lo, hi)
    for w in words:
        nxt = cur + w
        if len(bpe.encode(nxt.rstrip())) > want and cur:
            n = len(bpe.encode(cur.rstrip()))
            if n >= 8:
                out.append((cur.rstrip(), n))
            cur, want = w, rng.randint(lo, hi)
        else:
            cur = nxt
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    bpe = vocab_bpe(os.path.join(a.models, "tokenizer.json"))
    os.makedirs(a.out, exist_ok=True)
    for c in CORPORA:
        rng = random.Random(c)
        units = json.load(open(os.path.join(a.corpora, f"{c}.units.json")))
        allw = [w for u in units for w in windows(bpe, u, *RANGES[c], rng)]
        if len(allw) < PER_SET:
            sys.exit(f"{c}: only {len(allw)} windows")
        keep = [allw[i * len(allw) // PER_SET] for i in range(PER_SET)]
        with open(os.path.join(a.out, f"{c}.jsonl"), "w") as f:
            for text, n in keep:
                assert 8 <= n <= 64
                f.write(json.dumps({"prompt": text, "tokens": n}, ensure_ascii=False) + "\n")
        print(f"{c}: {len(keep)} prompts of {min(n for _, n in keep)}-{max(n for _, n in keep)} tokens "
              f"from {len(allw)} windows")


if __name__ == "__main__":
    main()
