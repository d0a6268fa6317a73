#!/usr/bin/env python3
"""smollm2_data.py: SmolLM2's own greedy continuations, the distillation data of its drafts (#11).

    .venv/bin/python tools/train/smollm2_data.py --url http://127.0.0.1:PORT --corpora DIR \\
        --out build/distill/teacher.jsonl [--per-domain 1500] [--requests N] [--max-tokens 96] [--clients 16]

Asks a running minionsd (`--model SmolLM2-135M-Instruct.Q4_1.gguf --http PORT`) over its OpenAI
API, greedy, for:
  kjv, web, devil  continuations of training text (a window of 12-64 words at a random place of
                   DIR/{name}.train.txt: the held-out units that the prompt sets come from are never
                   asked), through /v1/completions;
  chat             answers to instructions made from templates (smollm2_prompts.chat_prompts, the
                   training half), through /v1/chat/completions in the model's ChatML format.
A draft that predicts these continuations is one whose proposals greedy verification keeps. One JSON
object per line: {"domain", "prompt" | "messages", "text", "prompt_tokens", "completion_tokens"};
the token counts are the server's, so the trainer can check that it tokenizes as the server does.
The file is appended to, and requests already in it are not asked again (a run can be resumed).
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_prompts import DOMAINS, chat_prompts  # noqa: E402


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def text_windows(path, n, rng):
    """n windows of 12-64 words of a training text, at random places, cut at word boundaries."""
    words = re.findall(r"\S+\s*", open(path, encoding="utf-8").read())
    out = []
    for _ in range(n):
        k = rng.randint(12, 64)
        i = rng.randrange(0, len(words) - k)
        out.append("".join(words[i:i + k]).rstrip())
    return out


def jobs(corpora, per_domain, seed):
    """The requests, the domains interleaved (a run cut short still covers all four)."""
    rng = random.Random(seed)
    per = []
    for d in DOMAINS:
        if d == "chat":
            per.append([{"domain": d, "messages": [{"role": "user", "content": q}]}
                        for q in chat_prompts("train", per_domain, seed)])
        else:
            per.append([{"domain": d, "prompt": p}
                        for p in text_windows(os.path.join(corpora, f"{d}.train.txt"), per_domain, rng)])
    return [j for group in zip(*per) for j in group]


def ask(url, job, max_tokens):
    body = {"max_tokens": max_tokens, "temperature": 0}
    if "messages" in job:
        r = post(url, "/v1/chat/completions", dict(body, messages=job["messages"]))
        text = r["choices"][0]["message"]["content"]
    else:
        r = post(url, "/v1/completions", dict(body, prompt=job["prompt"]))
        text = r["choices"][0]["text"]
    return dict(job, text=text, prompt_tokens=r["usage"]["prompt_tokens"],
                completion_tokens=r["usage"]["completion_tokens"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-domain", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    key = lambda j: json.dumps([j["domain"], j.get("prompt"), j.get("messages")])
    done = set()
    if os.path.exists(a.out):
        done = {key(json.loads(line)) for line in open(a.out, encoding="utf-8")}
    todo = jobs(a.corpora, a.per_domain, a.seed)
    todo = [j for j in todo[:a.requests or len(todo)] if key(j) not in done]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t0, tokens = time.time(), 0
    with open(a.out, "a", encoding="utf-8") as f, \
            concurrent.futures.ThreadPoolExecutor(a.clients) as pool:
        for i, r in enumerate(pool.map(lambda j: ask(a.url, j, a.max_tokens), todo)):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            tokens += r["completion_tokens"]
            if i % 200 == 0 or i == len(todo) - 1:
                f.flush()
                dt = time.time() - t0
                print(f"smollm2_data: {i + 1}/{len(todo)} requests, {tokens} tokens, {tokens / dt:.0f} tok/s",
                      flush=True)


if __name__ == "__main__":
    main()
