#!/usr/bin/env python3
"""bench-llamacpp.py: minions against llama.cpp on the same GGUF files, side by side in one run.

For each model and each round, in alternating order, 2 threads: prefill of --prompt-tokens tokens
and decode of --gen-tokens tokens of one sequence, with llama-bench (its pp and tg tests) and
minions-bench-decode (its prefill and batch-1 decode lines); and decode of --batch sequences at
once (each after a --batch-prompt-tokens prompt), with llama-batched-bench (its S_TG) and
minions-bench-decode's batch line. Prints the medians and the ratios.

    tools/bench-llamacpp.py --llama /tmp/llama/build/bin [--rounds 3] [--kv-type f32|f16] [MODEL.gguf ...]

--kv-type: minions' KV cache (minions-bench-decode --kv-type; llama.cpp's default is F16).

Default models: the bundled target, and SmolLM2-135M-Instruct Q4_1 when fetched (models/cache/).
llama.cpp is built here from its source (docs/speculation.md says how); nothing is downloaded.
"""
import argparse
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def llama(args, model):
    out = subprocess.run([os.path.join(args.llama, "llama-bench"), "-m", model, "-p", str(args.prompt_tokens), "-n",
                          str(args.gen_tokens), "-t", str(args.threads), "-r", "1", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    res = json.loads(out)
    pp = next(r["avg_ts"] for r in res if r["n_prompt"] > 0)
    tg = next(r["avg_ts"] for r in res if r["n_gen"] > 0)
    return pp, tg


def llama_batched(args, model):
    """Decode tok/s of --batch sequences at once (llama-batched-bench's S_TG column)."""
    ctx = args.batch * (args.batch_prompt_tokens + args.gen_tokens)
    out = subprocess.run([os.path.join(args.llama, "llama-batched-bench"), "-m", model, "-c", str(ctx), "-b", "2048",
                          "-ub", "512", "-npp", str(args.batch_prompt_tokens), "-ntg", str(args.gen_tokens), "-npl",
                          str(args.batch), "-t", str(args.threads)], capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if re.match(rf"\|\s+{args.batch_prompt_tokens}\s+\|", line))
    return float(row.split("|")[8])


def llama_all(args, model):
    return llama(args, model) + (llama_batched(args, model),)


def minions(args, model):
    bench = [os.path.join(ROOT, "build", "minions-bench-decode"), "--model", model, "--threads", str(args.threads),
             "--kv-type", args.kv_type]
    out = subprocess.run(bench + ["--prompt-tokens", str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens),
                                  "--batches", "1"], capture_output=True, text=True, check=True).stdout
    pp = float(re.search(r"prefill\s+\d+ tokens\s+([\d.]+) tok/s", out).group(1))
    tg = float(re.search(r"decode\s+batch\s+1 x\s+\d+ tokens\s+([\d.]+) tok/s", out).group(1))
    out = subprocess.run(bench + ["--ctx-tokens", str(args.batch_prompt_tokens), "--gen-tokens", str(args.gen_tokens),
                                  "--batches", str(args.batch)], capture_output=True, text=True, check=True).stdout
    tgb = float(re.search(rf"decode\s+batch\s+{args.batch} x\s+\d+ tokens\s+([\d.]+) tok/s", out).group(1))
    return pp, tg, tgb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--llama", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="sequences of the batched decode")
    ap.add_argument("--batch-prompt-tokens", type=int, default=32, help="each batched sequence's prompt")
    ap.add_argument("--kv-type", default="f32", choices=("f32", "f16"), help="minions' KV cache")
    args = ap.parse_args()
    models = args.models or [os.path.join(ROOT, "models/target.gguf")]
    smol = os.path.join(ROOT, "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not args.models and os.path.exists(smol):
        models.append(smol)
    res = {}
    for r in range(args.rounds):
        for m in models:
            order = [("llama.cpp", llama_all), ("minions", minions)]
            for name, fn in order if r % 2 == 0 else reversed(order):
                res.setdefault((m, name), []).append(fn(args, m))
    print(f"{args.threads} threads, prefill {args.prompt_tokens} tokens, decode {args.gen_tokens} tokens of one "
          f"sequence and of {args.batch} (after {args.batch_prompt_tokens}-token prompts), minions' KV cache "
          f"{args.kv_type}; median of {args.rounds} alternating rounds\n")
    print("| model | measure | minions tok/s | llama.cpp tok/s | ratio |\n|---|---|---:|---:|---:|")
    for m in models:
        for k, what in ((0, f"prefill {args.prompt_tokens}"), (1, "decode"), (2, f"decode, {args.batch} sequences")):
            a = statistics.median(x[k] for x in res[(m, "minions")])
            b = statistics.median(x[k] for x in res[(m, "llama.cpp")])
            print(f"| {os.path.basename(m)} | {what} | {a:.0f} | {b:.0f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
