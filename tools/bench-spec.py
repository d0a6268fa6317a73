#!/usr/bin/env python3
"""bench-spec.py: collective speculative decoding measured side by side in one run.

One minionsd with every bundled draft and the n-gram drafter (or --target with its --drafts); the configurations are switched live
over the admin socket, so all of them run on the same process, the same machine state, in
alternating rounds (the order rotates every round). For each prompt set and for 1 and 16 clients
it prints the median over rounds of: throughput (tok/s), normalized latency (ms per output token),
mean accepted draft length per verification, and, from the server's own counters in the same run,
draft and verify cost (ms of compute per generated token); plus each configuration's speedup over
plain decoding (ratio of medians).

With the n-gram drafter, its shared cache (finished requests' text) must not hold the prompts it
is measured on, and must be the same for every configuration. So each round of a set first serves
--warm requests (not measured) with drafter.ngram.learn on, then freezes the cache (learn off), and
every configuration of that round is served the same fresh prompts; every round takes prompts no
earlier round used (a warning when the set runs out and prompts repeat), and never one the cache
has learned in any set (mixed.jsonl is the other three interleaved). The cache thus grows by
--warm requests per round, as a server's would from its earlier traffic. The servers run with
--prefix-cache off for the same reason: a configuration served a round's prompts after another one
would find their KV cached and skip the prefill that the first one paid.

Configurations: plain (spec.enabled false); each draft alone; ngram alone; ngram-flat (ngram with
drafter.ngram.short_len 16: every match proposes spec.length tokens, as before short matches were
capped), ngram-min1 (ngram with drafter.ngram.min_n 1: one-token matches propose too),
ngram-own (ngram with drafter.ngram.shared false: its own tokens only, not the shared cache of
finished requests; these three only with --configs); the vote of all four
with weights fixed at 1, learning global weights, learning per-sequence weights; the learning
votes with spec.skip_below 0.25 (a model drafter far below a request's best sits its rounds out);
all of them with spec.cascade (the model drafters draft only where the n-gram drafter proposed
nothing), and the last (+all, the server's default but for the cascade) with every drafter asked
for every request.

    tools/bench-spec.py [--rounds 5] [--tokens 64] [--sets kjv,web,devil,mixed] [--spec-length 4]
                        [--configs plain,ngram,...] [--clients 1,16] [--server-arg=--pipeline]
    tools/bench-spec.py --switch        # weights over a kjv -> devil -> web stream (docs/spec-weights.png)
    tools/bench-spec.py --tuner [--drafters ngram]   # the length tuner against every fixed length
    tools/bench-spec.py --target models/cache/SmolLM2-135M-Instruct.F16.gguf --kv-blocks 512 \
        --drafts smollm2-draft,smollm2-draft-bible,smollm2-draft-chat,ngram \
        --sets smollm2-kjv,smollm2-web,smollm2-devil,smollm2-chat     # another target and its drafts

--tuner: servers with the same drafters (--drafters: ngram, a draft's name, or vote = all four
with the default weights), one in fixed mode swept over spec.length 1..8 and plain decoding, and
one per tuner rule (--rules: slope, model, sequence) running --tuner adaptive for the whole run (each learns
across rounds, as a long-running server would; none is told the sweep's results); alternating
rounds, one server busy at a time. Reports each set's and client count's throughput, the best
fixed length, and adaptive / best fixed and adaptive / plain per rule (the bar: within 5% of the
best fixed, never below plain). --own-fixed S adds one fixed length on a server of its own, served
once a round like the tuner's, and the first rule's ratio to it: whether the swept server, which
serves nine configurations back to back, runs a length faster than a server of its own does.

Needs build/minionsd, build/minions-bench and build/minions-cli (make; MINIONS_BIN_DIR names another
folder, as tools/gpu-bundle.sh's run does). Results also go to that folder's bench-spec/results.md
(and .json).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import minionsd
from minionsd import BIN, ROOT

TARGET = os.path.join(ROOT, "models/target.gguf")
DRAFTS = ["draft-kjv", "draft-web", "draft-devil", "ngram"]
KV_BLOCKS = 0  # --kv-blocks for the server; 0: its default
DRAFT_BACKEND = ""  # --draft-backend for the server; "": the target's
SERVER_ARGS = []  # --server-arg: more minionsd arguments (e.g. --pipeline)
SKIP = 0.25  # spec.skip_below of the "+skip" configurations
NGRAM_SHORT = 2  # drafter.ngram.short_len: minionsd's default
NGRAM_MIN_N = 2  # drafter.ngram.min_n: minionsd's default
VOTES = ["vote-fixed", "vote-global", "vote-sequence", "vote-global+skip", "vote-sequence+skip",
         "vote-sequence+skip+all"]
CONFIGS = ["plain"] + DRAFTS + VOTES


class Server(minionsd.Server):
    """The minionsd of these benchmarks: the target and every drafter, configured live."""

    def __init__(self, spec_length, threads, max_batch, extra=()):
        # the length is fixed (and switched live) unless extra names a --tuner, which comes later and wins
        # --prefix-cache off: a round serves the same prompts to every configuration of a server,
        # and with the cache each after the first skipped their prefill. The tuner's sweep serves
        # nine configurations back to back, its adaptive server one, so until 2026-11-30 a fixed
        # length with one client ran 1.06-1.14x as fast on the sweep's server as on a server of
        # its own, and the tuner looked 0.88-0.92 of the best fixed length where it was level.
        args = ["--model", TARGET, "--threads", str(threads), "--max-batch", str(max_batch),
                "--spec-length", str(spec_length), "--tuner", "fixed", "--prefix-cache", "off"] + \
            minionsd.draft_args(DRAFTS)
        if KV_BLOCKS:
            args += ["--kv-blocks", str(KV_BLOCKS)]
        if DRAFT_BACKEND:
            args += ["--draft-backend", DRAFT_BACKEND]
        args += SERVER_ARGS + list(extra)
        # with --ngram-cache 0 there is no shared cache, and minionsd refuses drafter.ngram.shared
        self.shared_cache = not any(a == "--ngram-cache" and b == "0" for a, b in zip(args, args[1:]))
        super().__init__(args)

    def configure(self, config):
        self.set("spec.enabled", config != "plain")
        for d in DRAFTS:
            on = config.startswith("vote") or config == d or (d == "ngram" and config.startswith("ngram"))
            self.set(f"drafter.{d}.enabled", on)
        if "ngram" in DRAFTS:
            self.set("drafter.ngram.short_len", 16 if config == "ngram-flat" else NGRAM_SHORT)
            self.set("drafter.ngram.min_n", 1 if config == "ngram-min1" else NGRAM_MIN_N)
            if self.shared_cache:
                self.set("drafter.ngram.shared", config != "ngram-own")
        mode = "fixed" if "fixed" in config else "global" if "global" in config else "sequence"
        self.set("spec.weights", mode)
        self.set("spec.skip_below", SKIP if "+skip" in config else 0)
        self.set("spec.cascade", "+all" not in config)


def gnuplot(script):
    """Draw with gnuplot, or say how to get it: the tables are printed either way."""
    if not shutil.which("gnuplot"):
        print("no gnuplot, no plot (sh scripts/install-deps.sh --bench installs it)", file=sys.stderr)
        return False
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return True


def run_bench(server, prompts, clients, requests, tokens, first=0):
    before = server.stats()
    summary = minionsd.bench(server.addr, prompts, clients, requests, tokens, "--first", first)
    after = server.stats()
    gen = after["tokens"]["generated"] - before["tokens"]["generated"]
    verify_s = after["step_seconds"] - before["step_seconds"]
    draft_s = 0.0
    if "spec" in after:
        for d in DRAFTS:
            draft_s += after["spec"]["drafters"][d]["seconds"] - before["spec"]["drafters"][d]["seconds"]
    summary["verify_ms_per_token"] = 1e3 * verify_s / max(gen, 1)
    summary["draft_ms_per_token"] = 1e3 * draft_s / max(gen, 1)
    return summary


def client_runs(args):
    return [(c, args.requests1 if c == 1 else args.requests16) for c in map(int, args.clients.split(","))]


class PromptSlices:
    """Each round's prompts of a set, as a file of their own: the next ones of the set in order,
    passing over every prompt the n-gram drafter's shared cache has learned (in any set: mixed.jsonl
    is the other three interleaved, so a slice of it taken by position held prompts that kjv's, web's
    and devil's warm-up requests had taught the cache, with their very continuations)."""

    def __init__(self, directory):
        self.dir = directory
        self.cursor = {}  # set -> the index of the next prompt to consider
        self.learned = set()  # prompt lines the cache has seen
        self.repeated = set()  # sets that ran out of unused prompts and started over

    def take(self, s, n, learn):
        lines = open(os.path.join(ROOT, "prompts", s + ".jsonl")).read().splitlines()
        taken, i, tries = [], self.cursor.get(s, 0), 0
        while len(taken) < n and tries < 2 * len(lines):
            line = lines[i % len(lines)]
            if i >= len(lines):
                self.repeated.add(s)
            if line.strip() and (learn or line not in self.learned):
                taken.append(line)
            i, tries = i + 1, tries + 1
        if len(taken) < n:
            raise SystemExit(f"bench-spec: {s} has too few prompts the n-gram cache has not learned")
        self.cursor[s] = i
        if learn:
            self.learned.update(taken)
        path = os.path.join(self.dir, f"{s}-{len(self.learned)}-{i}.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(taken) + "\n")
        return path


def evaluate(args):
    global CONFIGS
    CONFIGS = args.configs.split(",") if args.configs else CONFIGS
    server = Server(args.spec_length, args.threads, 16)
    results = {}  # (set, clients, config) -> list of summaries
    ngram = "ngram" in DRAFTS
    tmp = tempfile.mkdtemp(prefix="bench-spec-")
    slices = PromptSlices(tmp)
    try:
        for r in range(args.rounds):
            for s in args.sets.split(","):
                if ngram:  # the shared cache learns from warm-up requests only, then is frozen
                    server.configure("ngram")
                    server.set("drafter.ngram.learn", True)
                    run_bench(server, slices.take(s, args.warm, True), 1, args.warm, args.tokens)
                    server.set("drafter.ngram.learn", False)
                prompts = slices.take(s, max(requests for _, requests in client_runs(args)), False)
                order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
                for config in order:
                    server.configure(config)
                    for clients, requests in client_runs(args):
                        summ = run_bench(server, prompts, clients, requests, args.tokens)
                        results.setdefault((s, clients, config), []).append(summ)
                print(f"round {r + 1}/{args.rounds}: {s} done", file=sys.stderr, flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for s in sorted(slices.repeated):
        print(f"warning: {s} ran out of prompts and started over: a configuration may have met a prompt "
              "twice", file=sys.stderr)
    return results


def report(args, results):
    med = lambda xs: statistics.median(xs)
    lines = [f"minionsd, {os.path.basename(TARGET)} + {', '.join(DRAFTS)}; spec.length {args.spec_length}, {args.tokens} tokens "
             f"per request, greedy, {args.threads} threads; median of {args.rounds} alternating rounds "
             f"(`{' '.join(['tools/bench-spec.py'] + sys.argv[1:])}`)", ""]
    table = {}
    for s in args.sets.split(","):
        for clients, _ in client_runs(args):
            lines.append(f"### {s}, {clients} client{'s' if clients > 1 else ''}")
            lines.append("")
            lines.append("| configuration | tok/s | x plain | ms/token (norm. latency) | accepted/verification "
                         "| draft ms/token | verify ms/token |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            plain = med([x["tok_per_s"] for x in results[(s, clients, "plain")]])
            for config in CONFIGS:
                xs = results[(s, clients, config)]
                tps = med([x["tok_per_s"] for x in xs])
                row = {
                    "tok_per_s": tps,
                    "speedup": tps / plain,
                    "norm_latency_ms": med([x["norm_latency_ms"] for x in xs]),
                    "mean_accepted_len": med([x["mean_accepted_len"] for x in xs]),
                    "draft_ms_per_token": med([x["draft_ms_per_token"] for x in xs]),
                    "verify_ms_per_token": med([x["verify_ms_per_token"] for x in xs]),
                }
                table[f"{s}/{clients}/{config}"] = row
                lines.append(f"| {config} | {tps:.0f} | {row['speedup']:.2f}x | {row['norm_latency_ms']:.2f} | "
                             f"{row['mean_accepted_len']:.2f} | {row['draft_ms_per_token']:.3f} | "
                             f"{row['verify_ms_per_token']:.3f} |")
            lines.append("")
    out = os.path.join(BIN, "bench-spec")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(table, f, indent=1)
    print("\n".join(lines))


def switch(args):
    """One client, global weights learning, over kjv then devil then web prompts: weights per request."""
    # no shared n-gram cache: these runs repeat their prompts, whose text it would hold
    server = Server(args.spec_length, args.threads, 16, extra=["--ngram-cache", "0"])
    out = os.path.join(BIN, "bench-spec")
    os.makedirs(out, exist_ok=True)
    data = os.path.join(out, "weights.dat")
    try:
        server.configure("vote-global")
        n = 0
        with open(data, "w") as f:
            f.write("# request " + " ".join(DRAFTS) + "\n")
            for s in ("kjv", "devil", "web"):
                with open(os.path.join(ROOT, "prompts", s + ".jsonl")) as pf:
                    prompts = [json.loads(l)["prompt"] for l in pf][:args.switch_requests]
                tmp = os.path.join(out, "one.jsonl")
                for p in prompts:
                    with open(tmp, "w") as t:
                        t.write(json.dumps({"prompt": p}) + "\n")
                    run_bench(server, tmp, 1, 1, args.tokens)
                    w = server.stats()["spec"]["drafters"]
                    n += 1
                    f.write(f"{n} " + " ".join(f"{w[d]['weight']:.4f}" for d in DRAFTS) + "\n")
    finally:
        server.stop()
    png = os.path.join(ROOT, "docs", "spec-weights.png")
    k = args.switch_requests
    plot = f"""set terminal pngcairo size 900,420
set output '{png}'
set title 'Global drafter weights over a prompt stream: kjv, then devil, then web (vote-global, greedy)'
set xlabel 'request'
set ylabel 'weight (log scale)'
set logscale y 2
set key outside right
set arrow from {k + 0.5}, graph 0 to {k + 0.5}, graph 1 nohead dt 2
set arrow from {2 * k + 0.5}, graph 0 to {2 * k + 0.5}, graph 1 nohead dt 2
plot """ + ", ".join(f"'{data}' using 1:{i + 2} with linespoints title '{d}'" for i, d in enumerate(DRAFTS)) + "\n"
    print(f"weights per request: {data}" + (f"; plot: {png}" if gnuplot(plot) else ""))


def tuner_eval(args):
    # no shared n-gram cache: the rounds repeat their prompts, whose text it would hold
    fixed = Server(args.spec_length, args.threads, 16, extra=["--ngram-cache", "0"])
    rules = args.rules.split(",")
    adaptive = {r: Server(args.spec_length, args.threads, 16,
                          extra=["--tuner", f"adaptive,rule={r}", "--ngram-cache", "0"]) for r in rules}
    # --own-fixed S: one more fixed length on a server of its own, served once a round like the
    # tuner's, beside the live-switched server's lengths
    own = {"own": Server(args.own_fixed, args.threads, 16, extra=["--ngram-cache", "0"])} if args.own_fixed else {}
    configs = ["plain"] + [f"s{k}" for k in range(1, 9)] + rules + list(own)
    results, classes = {}, {}
    try:
        for srv in [fixed] + list(adaptive.values()) + list(own.values()):
            for d in DRAFTS:
                srv.set(f"drafter.{d}.enabled", args.drafters in ("vote", d))
        for r in range(args.rounds):
            for s in args.sets.split(","):
                prompts = os.path.join(ROOT, "prompts", s + ".jsonl")
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for config in order:
                    srv = adaptive.get(config, own.get(config, fixed))
                    if srv is fixed:
                        fixed.set("spec.enabled", config != "plain")
                        if config != "plain":
                            fixed.set("spec.length", int(config[1:]))
                    for clients, requests in ((1, args.requests1), (16, args.requests16)):
                        summ = run_bench(srv, prompts, clients, requests, args.tokens)
                        results.setdefault((s, clients, config), []).append(summ)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        classes = {r: srv.stats()["spec"]["tuner"]["batch"] for r, srv in adaptive.items()}
    finally:
        fixed.stop()
        for srv in list(adaptive.values()) + list(own.values()):
            srv.stop()
    med = statistics.median
    lines = [f"minionsd, bundled target, drafters: {args.drafters}; {args.tokens} tokens per request, greedy, "
             f"{args.threads} threads; median tok/s of {args.rounds} alternating rounds "
             f"(`{' '.join(['tools/bench-spec.py'] + sys.argv[1:])}`)", "",
             "| set | clients | plain | " + " | ".join(f"s={k}" for k in range(1, 9)) + " | " +
             " | ".join(f"adaptive {r}" for r in rules) + " | best fixed | held-out fixed | " +
             " | ".join(f"{r} / best fixed | {r} / held-out | {r} / plain" for r in rules) +
             "".join(f" | own s={args.own_fixed} | {r} / own" for r in rules[:1] if own) + " |",
             "|---|---:|" + "---:|" * (11 + 4 * len(rules) + 2 * bool(own))]
    table = {}
    for s in args.sets.split(","):
        for clients in (1, 16):
            runs = {c: [x["tok_per_s"] for x in results[(s, clients, c)]] for c in configs}
            tps = {c: med(runs[c]) for c in configs}
            fixed_lengths = [f"s{k}" for k in range(1, 9)]
            best = max(fixed_lengths, key=lambda c: tps[c])
            # The best of eight noisy medians sits above the true best length's throughput (a
            # selection bias), so also: in each round, the length that was best over the other
            # rounds, measured in this one; the median of those is what choosing a fixed length
            # by sweeping would have given on rounds it did not see.
            held = med([runs[max(fixed_lengths, key=lambda c: med(runs[c][:i] + runs[c][i + 1:]))][i]
                        for i in range(len(runs["plain"]))])
            table[f"{s}/{clients}"] = dict(tps, best=best, held_out=held)
            lines.append(f"| {s} | {clients} | " + " | ".join(f"{tps[c]:.0f}" for c in configs if c not in own) +
                         f" | {best[1:]} | {held:.0f} | " +
                         " | ".join(f"{tps[r] / tps[best]:.3f} | {tps[r] / held:.3f} | {tps[r] / tps['plain']:.2f}x"
                                    for r in rules) +
                         "".join(f" | {tps['own']:.0f} | {tps[r] / tps['own']:.3f}" for r in rules[:1] if own) + " |")
    # draft and verify cost per generated token (the server's own counters), beside every speedup
    lines += ["", "Compute per generated token from the servers' counters, draft / verify ms (medians over "
              "rounds):", "", "| set | clients | plain | best fixed | " + " | ".join(rules) + " |",
              "|---|---:|---:|---:|" + "---:|" * len(rules)]
    for s in args.sets.split(","):
        for clients in (1, 16):
            xs = lambda c: results[(s, clients, c)]
            cost = lambda c: (f"{med([x['draft_ms_per_token'] for x in xs(c)]):.3f} / "
                              f"{med([x['verify_ms_per_token'] for x in xs(c)]):.3f}")
            best = table[f"{s}/{clients}"]["best"]
            table[f"{s}/{clients}"]["draft_verify_ms"] = {c: cost(c) for c in ["plain", best] + rules}
            lines.append(f"| {s} | {clients} | {cost('plain')} | {cost(best)} (s = {best[1:]}) | " +
                         " | ".join(cost(r) for r in rules) + " |")
    for r in rules:
        lines += ["", f"The adaptive server's ({r} rule) lengths at the end, with its measured points and the "
                  "model's estimates (us per produced token by length):", ""]
        for cls, k in classes[r].items():
            by_len = lambda d: sorted(d.items(), key=lambda i: int(i[0]))
            curve = ", ".join(f"{x}: {v['us_per_token']:.0f}" for x, v in by_len(k["curve"]))
            model = ", ".join(f"{x}: {v:.0f}" for x, v in by_len(k["model"]))
            lines.append(f"- batch {cls}: s = {k['s']} after {k['decisions']} decisions ({k['moves']} moves, "
                         f"{k['probes']} probes); measured {curve}; model {model}")
    out = os.path.join(BIN, "bench-spec")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"tuner-{args.drafters}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, f"tuner-{args.drafters}.json"), "w") as f:
        json.dump({"table": table, "classes": classes}, f, indent=1)
    print("\n".join(lines))
    plot_tuner(args, table, out)


def plot_tuner(args, table, out):
    """docs/spec-tuner.png: throughput / plain by fixed length (0 = plain), adaptive at the right."""
    sets = args.sets.split(",")
    data = os.path.join(out, f"tuner-{args.drafters}.dat")
    with open(data, "w") as f:
        for clients in (1, 16):
            f.write(f"# {clients} client(s): x " + " ".join(sets) + "\n")
            for x, c in enumerate(["plain"] + [f"s{k}" for k in range(1, 9)] + args.rules.split(",")):
                x = x if x <= 8 else x + 0.6  # the rules a little apart from the lengths
                f.write(f"{x} " + " ".join(f"{table[f'{s}/{clients}'][c] / table[f'{s}/{clients}']['plain']:.4f}"
                                          for s in sets) + "\n")
            f.write("\n\n")
    png = os.path.join(ROOT, "docs", "spec-tuner.png")
    rules = args.rules.split(",")
    xtics_rules = "".join(f", '{r}' {9.6 + i}" for i, r in enumerate(rules))
    panels = []
    for i, clients in enumerate((1, 16)):
        curves = ", ".join(f"'{data}' index {i} using 1:{j + 2} with linespoints title '{s}'" for j, s in enumerate(sets))
        panels.append(f"set title '{clients} client{'s' if clients > 1 else ''}'\nplot {curves}, 1 with lines dt 2 lc "
                      f"'gray' notitle")
    plot = f"""set terminal pngcairo size 1000,420
set output '{png}'
set multiplot layout 1,2 title 'Fixed speculation length vs the adaptive tuner ({args.drafters} drafter, {args.rounds} alternating rounds)'
set xlabel 'fixed length, then the tuner by rule'
set ylabel 'throughput / plain decoding'
set xtics ('plain' 0, '1' 1, '2' 2, '3' 3, '4' 4, '5' 5, '6' 6, '7' 7, '8' 8{xtics_rules})
set xrange [-0.5:{9.3 + len(rules)}]
set key below horizontal
""" + "\n".join(panels) + "\nunset multiplot\n"
    if gnuplot(plot):
        print(f"plot: {png}")


def main():
    global TARGET, DRAFTS, CONFIGS, KV_BLOCKS, DRAFT_BACKEND, SERVER_ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests1", type=int, default=6, help="requests of the 1-client runs")
    ap.add_argument("--requests16", type=int, default=32, help="requests of the 16-client runs")
    ap.add_argument("--warm", type=int, default=8, help="requests per round and set that fill the shared cache")
    ap.add_argument("--sets", default="kjv,web,devil,mixed")
    ap.add_argument("--spec-length", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--switch", action="store_true", help="the weights-over-time run instead")
    ap.add_argument("--switch-requests", type=int, default=20, help="requests per domain in --switch")
    ap.add_argument("--configs", default="", help="a subset of " + ",".join(CONFIGS) + ", or ngram-flat, ngram-min1, ngram-own (plain is needed)")
    ap.add_argument("--clients", default="1,16", help="client counts: 1, 16 or both")
    ap.add_argument("--tuner", action="store_true", help="the length tuner against a sweep of fixed lengths")
    ap.add_argument("--drafters", default="ngram", help="--tuner: ngram, draft-kjv, ..., or vote (all four)")
    ap.add_argument("--rules", default="slope,model,sequence", help="--tuner: the adaptive tuner's rules, each its own server")
    ap.add_argument("--own-fixed", type=int, default=0,
                    help="--tuner: also this fixed length on a server of its own (0: none), beside the first rule")
    ap.add_argument("--target", default=TARGET, help="the target model (default: the bundled one)")
    ap.add_argument("--drafts", default=",".join(DRAFTS), help="drafters: names of models/*.gguf, or ngram")
    ap.add_argument("--kv-blocks", type=int, default=0, help="the server's --kv-blocks (a long-context target)")
    ap.add_argument("--draft-backend", default="", help="the server's --draft-backend (cpu, cuda): where the draft models run")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more minionsd argument, repeatable: --server-arg=--pipeline")
    args = ap.parse_args()
    if args.tuner and args.rounds < 2:
        ap.error("--tuner needs --rounds 2 or more: its held-out length is chosen on the other rounds")
    TARGET, DRAFTS, KV_BLOCKS = os.path.abspath(args.target), args.drafts.split(","), args.kv_blocks
    DRAFT_BACKEND, SERVER_ARGS = args.draft_backend, args.server_arg
    CONFIGS = ["plain"] + DRAFTS + VOTES
    if args.switch:
        switch(args)
    elif args.tuner:
        tuner_eval(args)
    else:
        report(args, evaluate(args))


if __name__ == "__main__":
    main()
