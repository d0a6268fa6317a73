#!/usr/bin/env python3
"""bench-llamacpp-spec.py: speculative decoding in minions and in llama.cpp, side by side in one run.

For each prompt (the first --prompts of each set) and each round, in alternating order, one client
at a time, greedy, --tokens tokens, 2 threads:
  llama.cpp plain        llama-cli -no-cnv (its eval time: decode only)
  llama.cpp speculative  llama-speculative with the set's draft, --draft-max S (its "decoded" rate)
  minions plain          minionsd, spec.enabled false (decode rate: tokens after the first / time after it)
  minions speculative    the same minionsd: the set's draft alone, the n-gram drafter alone, the
                         vote of all drafters (spec.weights sequence, spec.skip_below 0.25)
Prints the median decode tok/s of each and each engine's speculative/plain ratio.

    tools/bench-llamacpp-spec.py --llama /tmp/llama/build/bin [--rounds 5] [--tokens 64] [--sets kjv,web]

llama.cpp is built here from its source (see docs/speculation.md); nothing is downloaded.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build")
from importlib import import_module  # noqa: E402

spec = import_module("bench-spec")  # the Server helper of tools/bench-spec.py


def llama_plain(args, prompt):
    out = subprocess.run([os.path.join(args.llama, "llama-cli"), "-m", os.path.join(ROOT, "models/target.gguf"),
                          "-no-cnv", "-p", prompt, "-n", str(args.tokens), "--temp", "0", "-t", str(args.threads),
                          "-c", "1024", "--ignore-eos"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    m = re.search(r"eval time =\s*([\d.]+) ms /\s*(\d+) runs", out.stderr)
    return int(m.group(2)) / (float(m.group(1)) / 1e3)


def llama_spec(args, prompt, draft):
    out = subprocess.run([os.path.join(args.llama, "llama-speculative"), "-m", os.path.join(ROOT, "models/target.gguf"),
                          "-md", os.path.join(ROOT, "models", draft + ".gguf"), "-p", prompt, "-n", str(args.tokens),
                          "--draft-max", str(args.spec_length), "--draft-min", "0", "--temp", "0", "-t",
                          str(args.threads), "-c", "1024"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", out.stderr)
    return int(m.group(1)) / float(m.group(2))


def minions_rate(server, prompt, tokens):
    """Decode rate of one request: tokens after the first over the time after the first."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"prompt": prompt}) + "\n")
    rec = f.name + ".out"
    subprocess.run([os.path.join(BIN, "minions-bench"), "--addr", server.addr, "--clients", "1", "--prompts", f.name,
                    "--requests", "1", "--max-tokens", str(tokens), "--out", rec], capture_output=True, check=True)
    r = json.loads(open(rec).read())
    os.unlink(f.name), os.unlink(rec)
    return (r["completion_tokens"] - 1) / (r["latency_s"] - r["ttft_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", required=True, help="directory with llama-cli and llama-speculative")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per set")
    ap.add_argument("--sets", default="kjv,web")
    ap.add_argument("--spec-length", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    server = spec.Server(args.spec_length, args.threads, 16)
    rates = {}
    try:
        for r in range(args.rounds):
            for s in args.sets.split(","):
                draft = "draft-" + s
                with open(os.path.join(ROOT, "prompts", s + ".jsonl")) as f:
                    prompts = [json.loads(l)["prompt"] for l in f][:args.prompts]
                systems = [
                    ("llama.cpp plain", lambda p: llama_plain(args, p)),
                    ("llama.cpp speculative", lambda p: llama_spec(args, p, draft)),
                    ("minions plain", lambda p: (server.configure("plain"), minions_rate(server, p, args.tokens))[1]),
                    ("minions speculative, " + draft,
                     lambda p: (server.configure(draft), minions_rate(server, p, args.tokens))[1]),
                    ("minions speculative, ngram",
                     lambda p: (server.configure("ngram"), minions_rate(server, p, args.tokens))[1]),
                    ("minions speculative, vote of all",
                     lambda p: (server.configure("vote-sequence+skip"), minions_rate(server, p, args.tokens))[1]),
                ]
                if r % 2:
                    systems.reverse()
                for name, fn in systems:
                    for p in prompts:
                        rates.setdefault((s, name), []).append(fn(p))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    print(f"decode tok/s, 1 client, greedy, {args.tokens} tokens, draft length {args.spec_length}, {args.threads} "
          f"threads; median over {args.rounds} alternating rounds x {args.prompts} prompts per set")
    for s in args.sets.split(","):
        print(f"\n| {s} | tok/s | vs its engine's plain |\n|---|---:|---:|")
        med = {name: statistics.median(v) for (ss, name), v in rates.items() if ss == s}
        for name, v in med.items():
            base = med["llama.cpp plain" if name.startswith("llama") else "minions plain"]
            print(f"| {name} | {v:.0f} | {v / base:.2f}x |")


if __name__ == "__main__":
    main()
