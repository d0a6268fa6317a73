#!/usr/bin/env python3
"""smollm2_agreement.py: how much of SmolLM2's greedy text each draft would get accepted (#11).

    /usr/bin/python3 tools/train/smollm2_agreement.py --url http://127.0.0.1:PORT \\
        --model models/cache/SmolLM2-135M-Instruct.Q4_1.gguf --drafts models [--prompts 24] [--tokens 64]

For every prompt set prompts/smollm2-{kjv,web,devil,chat}.jsonl (its first --prompts prompts) the
target's greedy continuation of --tokens tokens comes from a running minionsd (its OpenAI API; any
precision of SmolLM2: what is measured is agreement with that file's greedy text). Greedy speculative
decoding is then simulated for each draft (models/smollm2-draft*.gguf) and s = 1..8: from the true
prefix the draft rolls out s tokens; the accepted length is its longest prefix agreeing with the
target's text, and the target adds one token of its own. Acceptance rate = accepted / drafted
tokens; tokens per verification = (accepted + verifications) / verifications, what a target pass
yields. Prints the Markdown table of docs/models.md and writes it as JSON to --out.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ref_tokenize import BPE  # noqa: E402
from smollm2_data import post  # noqa: E402
from smollm2_drafts import FAMILY, MAX_LEN, hidden, load_draft  # noqa: E402
from smollm2_prompts import DOMAINS, encode_chat  # noqa: E402

S_MAX = 8


def continuation(url, bpe, row, n):
    """The prompt's token ids and the target's greedy continuation's."""
    body = {"max_tokens": n, "temperature": 0}
    if row.get("chat"):
        msgs = [{"role": "user", "content": row["prompt"]}]
        r = post(url, "/v1/chat/completions", dict(body, messages=msgs))
        return encode_chat(bpe, msgs), bpe.encode(r["choices"][0]["message"]["content"])
    r = post(url, "/v1/completions", dict(body, prompt=row["prompt"]))
    return bpe.encode(row["prompt"]), bpe.encode(r["choices"][0]["text"])


@torch.no_grad()
def rollout(model, prefix, s):
    """The draft's s greedy tokens after prefix (only the last position's logits are computed)."""
    out = list(prefix)
    for _ in range(s):
        last = hidden(model, torch.tensor(out[-MAX_LEN:])[None])[0, -1]
        out.append(int((last @ model.emb.weight.T).argmax()))
    return out[len(prefix):]


def matches(model, prompt, cont):
    """For each position of cont, how many of the draft's next S_MAX tokens agree with cont."""
    m = []
    for i in range(len(cont)):
        r = rollout(model, prompt + cont[:i], min(S_MAX, len(cont) - i))
        n = 0
        while n < len(r) and r[n] == cont[i + n]:
            n += 1
        m.append(n)
    return m


def simulate(m, s):
    """Greedy speculative decoding at length s over one continuation: (accepted, drafted, verifications)."""
    i = acc = drafted = ver = 0
    while i < len(m):
        a = min(m[i], s)
        acc, drafted, ver = acc + a, drafted + s, ver + 1
        i += a + 1
    return acc, drafted, ver


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--drafts", default="models")
    ap.add_argument("--prompts-dir", default="prompts")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="build/distill/agreement.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    bpe = BPE(a.model)
    drafts = [(spec[0], load_draft(os.path.join(a.drafts, f"{spec[0]}.gguf"), spec).eval())
              for spec in FAMILY if os.path.exists(os.path.join(a.drafts, f"{spec[0]}.gguf"))]
    result = {}
    for d in DOMAINS:
        rows = [json.loads(line) for line in open(os.path.join(a.prompts_dir, f"smollm2-{d}.jsonl"))][:a.prompts]
        conts = [continuation(a.url, bpe, r, a.tokens) for r in rows]
        for name, model in drafts:
            ms = [matches(model, p, c) for p, c in conts]
            row = {}
            for s in range(1, S_MAX + 1):
                acc, drafted, ver = map(sum, zip(*(simulate(m, s) for m in ms)))
                row[s] = {"acceptance": acc / drafted, "per_verification": (acc + ver) / ver}
            result.setdefault(name, {})[d] = row
            print(f"{name} {d}: " + " ".join(f"s={s} {row[s]['acceptance']:.2f}/{row[s]['per_verification']:.2f}"
                                            for s in row), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(result, open(a.out, "w"), indent=1)
    print("\n| draft | set | " + " | ".join(f"s={s}" for s in range(1, S_MAX + 1)) + " |")
    print("|---|---|" + "---|" * S_MAX)
    for name, sets in result.items():
        for d, row in sets.items():
            print(f"| {name} | {d} | " + " | ".join(f"{row[s]['acceptance']:.2f} ({row[s]['per_verification']:.2f})"
                                                   for s in range(1, S_MAX + 1)) + " |")


if __name__ == "__main__":
    main()
