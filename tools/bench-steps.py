#!/usr/bin/env python3
"""bench-steps.py: where a served run's time goes, step by step, plain decoding beside speculation.

One minionsd per configuration, each writing its step trace (--step-trace: a JSON line per target
step, src/actors/verifier.h), served in alternating rounds by minions-bench (the order rotates
every round, one server busy at a time). Each step is assigned to the run it fell in, and for each
configuration, prompt set and client count the medians over rounds of:

  tok/s        the client's throughput (prefill included)
  mean tok/s   its mean over rounds, and x first, the mean over rounds of its ratio to the first
               configuration's run in the same round: what medians hide, rare costly runs (a tuner
               learning or probing), shows here
  pass %       target passes (and acceptance, on the worker) over the run's span
  us/pass tok  pass time per token the passes computed (prompt, own and drafted tokens)
  us/token     pass time per token produced
  tok/pass     tokens the passes computed per token produced (drafts kept and lost included)
  prompt %     share of pass time in steps that carry prompt tokens
  seqs         sequences per step, weighted by pass time (how full the batch ran)
  to worker us per step: handed to the worker -> the pass starts (the worker's wake-up)
  to loop us   per step: the pass ends -> the loop has it (the loop's wake-up)
  loop us      per step: the loop's own time between steps (streaming, scheduling), rounds excluded
  round us     per step: drafting (planned -> voted)
  draft/seq    drafted tokens per sequence and step, over the steps without prompt tokens
  beta us      over those steps, the slope of a least-squares line of pass time per sequence over
               drafted tokens per sequence: what one more draft token costs a step
  theta        beta over those steps' pass time per produced token: the sequence rule's threshold
               (src/spec/tuner.h), here measured from outside

With --by-draft, a second table: for each speculating configuration and set, the one-sequence
steps without prompt tokens (each a single sequence's verification) grouped by the tokens drafted,
with how many the target kept on average and how often it kept them all, and a third: the same
steps by draft position, how many drafts reached each position and the share that kept it
(position 1 is the first token's rate, each later one the rate once the token before was kept):
where acceptance along a draft is not geometric, these show it (docs/speculation.md).

With --by-class, a last table: every step of each configuration's server, whatever run it fell in,
by sequences per step (1, 2, 3-4, 5-8, 9-16): how many were speculating and their share of the
class's time, the class's us per produced token, and draft tokens per speculating step: where an
adaptive tuner's probes and first windows go.

With --first-windows K, each configuration's server's first K windows of 32 steps reported to the
tuner (the trace's `measured`; those of the tuner's warm-up included), in trace order: us per
produced token of the whole cycle (return to return), of drafting rounds, of passes, and of the
drafters' backlog (catching up after plain steps), and the window's speculating steps: what the
tuner's first decisions compare, as the vote's weights learn.

Every server runs with --ngram-cache 0 and --prefix-cache off: the rounds repeat their prompts,
and from the second round on a server would find their text and their KV cached (until
2026-11-30 the prefix cache was on, and only the first round's steps prefilled their prompts).

Configurations: plain (no drafter), ngram (the n-gram drafter), vote (the three bundled drafts and
ngram), each optionally +tuner (adaptive, sequence rule; +tuner:s_min=6:s_max=6 sets tuner keys
too) and +pipe (--pipeline, the drafts on
--pipe-threads compute threads of their own beside the target's --threads: vote+tuner+pipe);
speculating ones at --spec-length. CONFIG@DIR
runs DIR's minionsd (two builds side by side: plain@/tmp/old/build,plain). --busy N keeps N
busy-looping processes running beside the servers for the whole run: the engine on cores it
shares with other work.

    tools/bench-steps.py [--configs plain,ngram,ngram+tuner] [--sets kjv,mixed] [--clients 1,16]
                         [--rounds 4] [--requests1 16] [--requests16 128] [--tokens 64]
                         [--busy 0] [--pipe-threads 1] [--target models/target.gguf]
                         [--temperature 0 [--top-p 1]] [--by-draft] [--by-class] [--first-windows 8]

Another --target serves plain and ngram configurations (the bundled drafts share only the bundled
target's vocabulary); --temperature above 0 makes every request sampled.

Needs build/minionsd and build/minions-bench (MINIONS_BIN_DIR names another folder).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import minionsd
from minionsd import BIN, ROOT

DRAFTS = {"ngram": ["ngram"], "vote": ["draft-kjv", "draft-web", "draft-devil", "ngram"]}
COLUMNS = ["tok/s", "pass %", "us/pass tok", "us/token", "tok/pass", "prompt %", "seqs", "to worker us", "to loop us",
           "loop us", "round us", "draft/seq", "beta us", "theta"]


class Server(minionsd.Server):
    """A configuration's minionsd, tracing its steps."""

    def __init__(self, config, args, workdir):
        name, _, bindir = config.partition("@")
        name, *options = name.split("+")
        self.trace = os.path.join(workdir, config.replace("/", "_") + ".jsonl")
        pipe = "pipe" in options
        threads = args.threads + (args.pipe_threads if pipe else 0)
        cmd = ["--model", os.path.join(ROOT, args.target), "--threads", str(threads), "--max-batch", "16",
               "--spec-length", str(args.spec_length), "--ngram-cache", "0", "--prefix-cache", "off",
               "--step-trace", self.trace]
        if name != "plain":
            cmd += minionsd.draft_args(DRAFTS[name])
        tuner = [o for o in options if o.split(":")[0] == "tuner"]
        if tuner:  # tuner:KEY=VALUE:... sets the tuner's keys beside the sequence rule
            cmd += ["--tuner", ",".join(["adaptive", "rule=sequence"] + tuner[0].split(":")[1:])]
        else:
            cmd += ["--tuner", "fixed"]
        if pipe:
            cmd += ["--pipeline", "--draft-threads", str(args.pipe_threads)]
        super().__init__(cmd, admin=False, bindir=bindir)

    def stop(self):
        """The steps of the trace, complete once the engine has drained."""
        super().stop()
        with open(self.trace) as f:
            return [json.loads(line) for line in f]


def serve(server, prompts, clients, requests, args):
    t0 = time.monotonic()  # the trace's clock (CLOCK_MONOTONIC)
    summary = minionsd.bench(server.addr, prompts, clients, requests, args.tokens, "--temperature", args.temperature,
                             "--top-p", args.top_p)
    return {"t0": t0, "t1": time.monotonic(), "tok_per_s": summary["tok_per_s"]}


def breakdown(run, steps):
    """The columns of one run from its steps (those handed to the worker within it)."""
    st = [s for s in steps if run["t0"] <= s["submit"] <= run["t1"]]
    if not st:
        return None
    pass_s = [s["end"] - s["start"] for s in st]
    busy, n = sum(pass_s), len(st)
    rounds = sum(s["round"][1] - s["round"][0] for s in st if s["round"])
    # between one step's back and the next one's submit: the loop, and the round when there is one
    between = sum(b["submit"] - a["back"] for a, b in zip(st, st[1:]))
    produced = sum(s["produced"] for s in st)
    tokens = sum(s["tokens"] for s in st)
    beta, theta, per_seq = line_of_drafts([s for s in st if not s["prompt"]])
    return {
        "tok/s": run["tok_per_s"],
        "pass %": 100 * busy / (st[-1]["back"] - st[0]["submit"]),
        "us/pass tok": 1e6 * busy / tokens,
        "us/token": 1e6 * busy / max(produced, 1),
        "tok/pass": tokens / max(produced, 1),
        "prompt %": 100 * sum(p for p, s in zip(pass_s, st) if s["prompt"]) / busy,
        "seqs": sum(p * s["seqs"] for p, s in zip(pass_s, st)) / busy,
        "to worker us": 1e6 * sum(s["start"] - s["submit"] for s in st) / n,
        "to loop us": 1e6 * sum(s["back"] - s["end"] for s in st) / n,
        "loop us": 1e6 * (between - rounds) / n,
        "round us": 1e6 * rounds / n,
        "draft/seq": per_seq,
        "beta us": 1e6 * beta,
        "theta": theta,
    }


def line_of_drafts(st):
    """(beta, theta, drafted per sequence) over steps st; beta and theta NaN without a spread."""
    nan = float("nan")
    if not st:
        return nan, nan, nan
    xs = [s["drafted"] / s["seqs"] for s in st]
    ys = [(s["end"] - s["start"]) / s["seqs"] for s in st]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    produced = sum(s["produced"] for s in st)
    if sxx <= 0 or not produced:
        return nan, nan, mx
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return beta, beta / (sum(s["end"] - s["start"] for s in st) / produced), mx


def by_draft(steps):
    """{drafted: (steps, mean kept, share kept whole)} over one-sequence steps without prompt tokens."""
    kept = {}
    for st in steps:
        if st["seqs"] == 1 and not st["prompt"]:
            kept.setdefault(st["drafted"], []).append(st["produced"] - 1)
    return {d: (len(k), statistics.mean(k), sum(a == d for a in k) / len(k)) for d, k in sorted(kept.items())}


def by_position(steps):
    """{j: (drafts that reached draft position j, share of them that kept it)} over one-sequence steps
    without prompt tokens: a draft reaches j when it has j tokens and kept the j - 1 before."""
    reached, kept = {}, {}
    for st in steps:
        if st["seqs"] == 1 and not st["prompt"]:
            a = st["produced"] - 1
            for j in range(1, min(a + 1, st["drafted"]) + 1):
                reached[j] = reached.get(j, 0) + 1
                kept[j] = kept.get(j, 0) + (a >= j)
    return {j: (reached[j], kept[j] / reached[j]) for j in sorted(reached)}


CLASSES = [(1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 16, "9-16")]


def by_class(steps):
    """[(class, steps, speculating steps, their share of the class's time, us per produced token,
    draft tokens per speculating step)] by sequences per step; a step's time runs from its round's
    start (or its submission) to its return."""
    out = []
    for lo, hi, name in CLASSES:
        st = [s for s in steps if lo <= s["seqs"] <= hi]
        if not st:
            continue
        took = [s["back"] - (s["round"][0] if s["round"] else s["submit"]) for s in st]
        spec = [(s, t) for s, t in zip(st, took) if s["round"]]
        out.append((name, len(st), len(spec), sum(t for _, t in spec) / sum(took),
                    1e6 * sum(took) / max(sum(s["produced"] for s in st), 1),
                    sum(s["drafted"] for s, _ in spec) / max(len(spec), 1)))
    return out


def by_window(steps, k, n=32):
    """The first k windows of n measured steps: (us per produced token of the cycle, of rounds, of
    passes, of backlog, speculating steps); a step's cycle runs from the return of the step before."""
    out, w = [], []
    for a, b in zip(steps, steps[1:]):
        if not b["measured"]:
            continue
        w.append((b["back"] - a["back"], b["produced"], b["round"][1] - b["round"][0] if b["round"] else 0,
                  b["end"] - b["start"], b.get("backlog", 0), b["round"] is not None))
        if len(w) == n:
            tokens = sum(x[1] for x in w)
            out.append(tuple(1e6 * sum(x[i] for x in w) / tokens for i in (0, 2, 3, 4)) + (sum(x[5] for x in w),))
            w = []
            if len(out) == k:
                break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="plain,ngram,ngram+tuner")
    ap.add_argument("--sets", default="kjv,mixed")
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests1", type=int, default=16)
    ap.add_argument("--requests16", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--spec-length", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes beside the servers")
    ap.add_argument("--pipe-threads", type=int, default=1, help="the drafts' own compute threads in +pipe configs")
    ap.add_argument("--target", default="models/target.gguf", help="the served model (ngram and plain configs for others)")
    ap.add_argument("--temperature", type=float, default=0.0, help="the requests' (0: greedy)")
    ap.add_argument("--top-p", type=float, default=1.0, help="the requests' top_p, with --temperature")
    ap.add_argument("--by-draft", action="store_true", help="also: one-sequence verifications by drafted tokens")
    ap.add_argument("--by-class", action="store_true", help="also: each server's steps by batch size class")
    ap.add_argument("--first-windows", type=int, default=0, help="also: each server's first K windows of 32 measured steps")
    args = ap.parse_args()
    configs = args.configs.split(",")
    clients = [int(c) for c in args.clients.split(",")]
    workdir = tempfile.mkdtemp(prefix="minions-bench-steps-")
    servers = {c: Server(c, args, workdir) for c in configs}
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
    runs = []  # (config, set, clients, run)
    try:
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for s in args.sets.split(","):
                prompts = os.path.join(ROOT, "prompts", s + ".jsonl")
                for c in order:
                    for k in clients:
                        run = serve(servers[c], prompts, k, args.requests1 if k == 1 else args.requests16, args)
                        runs.append((c, s, k, run))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for b in busy:
            b.kill()
        traces = {c: srv.stop() for c, srv in servers.items()}
    rows = {}
    for c, s, k, run in runs:
        b = breakdown(run, traces[c])
        if b:
            rows.setdefault((s, k, c), []).append(b)
    sampling = "greedy" if args.temperature <= 0 else f"temperature {args.temperature}, top_p {args.top_p}"
    lines = [f"minionsd, {os.path.basename(args.target)}, {args.tokens} tokens per request, {sampling}, {args.threads} threads, "
             f"spec.length {args.spec_length}, {args.busy} busy processes beside; medians of {args.rounds} alternating rounds "
             f"(`{' '.join(['tools/bench-steps.py'] + sys.argv[1:])}`)", "",
             "| set | clients | config | tok/s | mean tok/s | x first | " + " | ".join(COLUMNS[1:]) + " |",
             "|---|---:|---|" + "---:|" * (len(COLUMNS) + 2)]
    tps = {}  # (set, clients, config) -> tok/s by round
    for c, s, k, run in runs:
        tps.setdefault((s, k, c), []).append(run["tok_per_s"])
    for s in args.sets.split(","):
        for k in clients:
            for c in configs:
                med = {col: statistics.median(b[col] for b in rows.get((s, k, c), [])) for col in COLUMNS}
                mine, first = tps[(s, k, c)], tps[(s, k, configs[0])]
                mean = f"{statistics.mean(mine):.0f} | {statistics.mean(a / b for a, b in zip(mine, first)):.3f}"
                lines.append(f"| {s} | {k} | {c} | {med['tok/s']:.0f} | {mean} | " + " | ".join(
                    f"{med[col]:.2f}" if col in ("tok/pass", "seqs", "draft/seq", "theta") else f"{med[col]:.0f}"
                    for col in COLUMNS[1:]) + " |")
    if args.by_draft:
        lines += ["", "One-sequence verifications by tokens drafted (all rounds): steps, mean kept, share kept whole", "",
                  "| set | config | drafted | steps | kept | kept whole |", "|---|---|---:|---:|---:|---:|"]
        for s in args.sets.split(","):
            for c in (c for c in configs if not c.startswith("plain")):
                st = [x for cc, ss, k, run in runs if cc == c and ss == s
                      for x in traces[c] if run["t0"] <= x["submit"] <= run["t1"]]
                for d, (n, mean, whole) in by_draft(st).items():
                    lines.append(f"| {s} | {c} | {d} | {n} | {mean:.2f} | {whole:.2f} |")
        lines += ["", "The same verifications by draft position: drafts that reached it (kept every token before it),"
                  " and the share that kept it; `all` pools the sets", "",
                  "| set | config | position | reached | kept |", "|---|---|---:|---:|---:|"]
        for c in (c for c in configs if not c.startswith("plain")):
            for s in args.sets.split(",") + ["all"]:
                st = [x for cc, ss, k, run in runs if cc == c and s in (ss, "all")
                      for x in traces[c] if run["t0"] <= x["submit"] <= run["t1"]]
                for j, (n, rate) in by_position(st).items():
                    lines.append(f"| {s} | {c} | {j} | {n} | {rate:.2f} |")
    if args.by_class:
        lines += ["", "Every step of each configuration's server (all sets and client counts), by sequences per step:"
                  " speculating steps and their share of the time, us per produced token, draft tokens per"
                  " speculating step", "", "| config | class | steps | speculating | share | us/token | drafted |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for c in configs:
            for name, n, ns, share, us, dr in by_class(traces[c]):
                lines.append(f"| {c} | {name} | {n} | {ns} | {share:.3f} | {us:.1f} | {dr:.1f} |")
    if args.first_windows:
        lines += ["", f"Each server's first {args.first_windows} windows of 32 measured steps: us per produced token of"
                  " the cycle, of rounds, of passes and of the drafters' backlog; speculating steps of 32", "",
                  "| config | window | cycle | round | pass | backlog | speculating |", "|---|---:|---:|---:|---:|---:|---:|"]
        for c in configs:
            for i, (cyc, rnd, pas, bl, ns) in enumerate(by_window(traces[c], args.first_windows)):
                lines.append(f"| {c} | {i + 1} | {cyc:.0f} | {rnd:.0f} | {pas:.0f} | {bl:.0f} | {ns} |")
    print("\n".join(lines))
    out = os.path.join(BIN, "bench-steps")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
