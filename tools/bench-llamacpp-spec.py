#!/usr/bin/env python3
"""bench-llamacpp-spec.py: speculative decoding in minions and in llama.cpp, side by side in one run.

For each prompt (the first --prompts of each set) and each round, in alternating order, one client
at a time, greedy, --tokens tokens, 2 threads:
  llama.cpp plain        llama-completion -no-cnv, or llama-cli where that is all there is (older
                         llama.cpp); its eval time: decode only
  llama.cpp speculative  llama-speculative with the set's draft, draft length S (its "decoded" rate)
  llama.cpp lookup       llama-lookup: llama.cpp's n-gram (prompt lookup) drafting, draft length S, where
                         the build has it (its "decoded" rate)
  minions plain          minionsd, spec.enabled false (decode rate: tokens after the first / time after it)
  minions speculative    the same minionsd: the set's draft alone, the n-gram drafter alone, the
                         vote of all drafters (spec.weights sequence, spec.skip_below 0.25); the
                         n-gram drafter without its shared cache of finished requests (--ngram-cache
                         0), which would hold the text of the same prompts from earlier rounds and
                         systems, so that it drafts from each request's own tokens, as llama-lookup
Prints the median decode tok/s of each and each engine's speculative/plain ratio.

    tools/bench-llamacpp-spec.py --llama /tmp/llama/build/bin [--rounds 5] [--tokens 64] [--sets kjv,web] [--gpu]

llama.cpp is built here from its source (see docs/speculation.md); nothing is downloaded. With --gpu,
llama.cpp puts every layer of target and draft on the GPU (-ngl 99, -ngld 99) and minionsd runs on its
default backend (CUDA where a device runs it). MINIONS_BIN_DIR names the directory of minions'
programs (default build/).
"""
import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

spec = import_module("bench-spec")  # the Server helper of tools/bench-spec.py
import minionsd  # noqa: E402


def gpu_layers(args, *flags):
    """llama.cpp's flags that put every layer on the GPU, with --gpu."""
    return [x for f in flags for x in (f, "99")] if args.gpu else []


def llama_plain(args, prompt):
    exe = os.path.join(args.llama, "llama-completion")
    if not os.path.exists(exe):
        exe = os.path.join(args.llama, "llama-cli")
    m = run_llama([exe, "-m", os.path.join(ROOT, "models/target.gguf"),
                   "-no-cnv", "-p", prompt, "-n", str(args.tokens), "--temp", "0", "-t", str(args.threads),
                   "-c", "1024"] + gpu_layers(args, "-ngl"),
                  r"eval time =\s*([\d.]+) ms /\s*(\d+) runs")
    return int(m.group(2)) / (float(m.group(1)) / 1e3)


@functools.cache  # asked once per binary, not once per run
def draft_length_flags(exe):
    """The draft length flags llama-speculative takes: --spec-draft-n-max/min in newer llama.cpp (0.3.36's
    vendored tree), which refuses the older --draft-max/min with an error."""
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    return ("--spec-draft-n-max", "--spec-draft-n-min") if "--spec-draft-n-max" in help_text else ("--draft-max",
                                                                                                  "--draft-min")


def run_llama(cmd, pattern):
    """Run a llama.cpp program and return the match of pattern in its log (stderr). Its log is written by
    a thread of its own (common/log.cpp), and now and then a run exits 0 before that thread has written
    its last lines (the 0.3.36 tree: 3 runs in the 200 of `--rounds 5 --prompts 10`; none in 30 runs
    of one such command alone): such a run is repeated, up to twice."""
    for _ in range(3):
        out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        m = re.search(pattern, out.stderr)
        if m or out.returncode != 0:
            break
        print(f"{os.path.basename(cmd[0])}: its log ended early; running it again", file=sys.stderr)
    if not m:
        sys.exit(f"{os.path.basename(cmd[0])}: no rate in its output (exit status {out.returncode}; "
                 f"{' '.join(cmd)}); its last lines:\n" + "\n".join(out.stderr.splitlines()[-8:]))
    return m


def llama_spec(args, prompt, draft=None):
    """The decode rate of llama-speculative with a draft model, or without one of llama-lookup (its
    n-gram drafting), at draft length --spec-length."""
    exe = os.path.join(args.llama, "llama-speculative" if draft else "llama-lookup")
    n_max, n_min = draft_length_flags(exe)
    cmd = [exe, "-m", os.path.join(ROOT, "models/target.gguf"), "-p", prompt, "-n", str(args.tokens),
           n_max, str(args.spec_length), "--temp", "0", "-t", str(args.threads), "-c", "1024"]
    if draft:
        cmd += ["-md", os.path.join(ROOT, "models", draft + ".gguf"), n_min, "0"]
    m = run_llama(cmd + gpu_layers(args, "-ngl", *(["-ngld"] if draft else [])),
                  r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
    return int(m.group(1)) / float(m.group(2))


def minions_rate(server, prompt, tokens):
    """Decode rate of one request: tokens after the first over the time after the first."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"prompt": prompt}) + "\n")
    rec = f.name + ".out"
    minionsd.bench(server.addr, f.name, 1, 1, tokens, "--out", rec)
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
    ap.add_argument("--gpu", action="store_true", help="llama.cpp with every layer on the GPU")
    args = ap.parse_args()
    server = spec.Server(args.spec_length, args.threads, 16, extra=["--ngram-cache", "0"])
    lookup = os.path.exists(os.path.join(args.llama, "llama-lookup"))
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
                ] + ([("llama.cpp lookup", lambda p: llama_spec(args, p))] if lookup else []) + [
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
