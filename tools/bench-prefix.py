#!/usr/bin/env python3
"""bench-prefix.py: what the prefix cache buys when requests share the start of their prompts.

Each request's prompt is one shared preamble (the first --preamble-lines prompts of --preamble-set
joined: a system prompt, a few-shot header, an earlier turn of a chat) followed by a prompt of its
own from --set. Two minionsd, the same binary, one with the prefix cache (the default) and one with
`--prefix-cache off`, served in alternating rounds by minions-bench (the order swaps every round,
one server busy at a time), with 1 and 16 clients. Prints per server the medians over rounds of
tok/s and of the median time to first token, and the ratios on / off; and the prompt positions the
cache gave (minionsd's stats, kv.target.adopted) against those admitted.

    tools/bench-prefix.py [--rounds 6] [--set kjv] [--preamble-set web] [--preamble-lines 8]
                          [--requests1 16] [--requests16 64] [--tokens 32] [--target models/target.gguf]
                          [--drafts draft-kjv,ngram]

--drafts: both servers speculate with these drafters (names of models/*.gguf, or ngram), whose
pools have prefix caches too when the target's has.

Needs build/minionsd, build/minions-bench and build/minions-cli (MINIONS_BIN_DIR names another
folder).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import minionsd
from minionsd import ROOT


def server(args, cache):
    """A minionsd of this run with its prefix cache on or off."""
    return minionsd.Server(["--model", os.path.join(ROOT, args.target), "--threads", str(args.threads),
                            "--prefix-cache", cache] + minionsd.draft_args(filter(None, args.drafts.split(","))))


def prompts_file(args, workdir):
    def texts(name):
        with open(os.path.join(ROOT, "prompts", name + ".jsonl")) as f:
            return [json.loads(line)["prompt"] for line in f]
    preamble = "\n".join(texts(args.preamble_set)[:args.preamble_lines]) + "\n"
    path = os.path.join(workdir, "prompts.jsonl")
    with open(path, "w") as f:
        for p in texts(args.set):
            f.write(json.dumps({"prompt": preamble + p}) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--set", default="kjv")
    ap.add_argument("--preamble-set", default="web")
    ap.add_argument("--preamble-lines", type=int, default=8)
    ap.add_argument("--requests1", type=int, default=16)
    ap.add_argument("--requests16", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="models/target.gguf")
    ap.add_argument("--drafts", default="", help="drafters of both servers: names of models/*.gguf, or ngram")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="minions-bench-prefix-")
    prompts = prompts_file(args, workdir)
    servers = {c: server(args, c) for c in ("on", "off")}
    runs = {}
    try:
        for r in range(args.rounds):
            for clients, requests in ((1, args.requests1), (16, args.requests16)):
                for c in (("on", "off") if r % 2 == 0 else ("off", "on")):
                    run = minionsd.bench(servers[c].addr, prompts, clients, requests, args.tokens)
                    runs.setdefault((c, clients), []).append(run)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        stats = {c: s.stats() for c, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()
    med = statistics.median
    drafted = f", drafters {args.drafts}" if args.drafts else ""
    lines = [f"minionsd, {os.path.basename(args.target)}{drafted}, prompts: {args.preamble_lines} {args.preamble_set} prompts as "
             f"a shared preamble + each {args.set} prompt, {args.tokens} tokens per request, greedy; medians of "
             f"{args.rounds} alternating rounds (`{' '.join(['tools/bench-prefix.py'] + sys.argv[1:])}`)", "",
             "| clients | tok/s on | tok/s off | on / off | TTFT p50 ms on | TTFT p50 ms off | off / on |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for clients in (1, 16):
        tps = {c: med([x["tok_per_s"] for x in runs[(c, clients)]]) for c in ("on", "off")}
        ttft = {c: med([x["ttft_p50_ms"] for x in runs[(c, clients)]]) for c in ("on", "off")}
        lines.append(f"| {clients} | {tps['on']:.0f} | {tps['off']:.0f} | {tps['on'] / tps['off']:.2f}x | "
                     f"{ttft['on']:.2f} | {ttft['off']:.2f} | {ttft['off'] / ttft['on']:.2f}x |")
    on = stats["on"]
    lines += ["", f"Prompt positions from the cache: {on['kv']['target']['adopted']} of {on['tokens']['prompt']} "
              f"admitted (the server with the cache off: {stats['off']['kv']['target']['adopted']})."]
    if "drafts" in on["kv"]:
        lines.append(f"The draft pools' caches: {on['kv']['drafts']['adopted']} positions, summed over the drafts.")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
