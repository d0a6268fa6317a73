#!/usr/bin/env python3
"""bench-eval.py: the Minions paper's evaluation on the bundled family, side by side in one run.

Systems (every one a server on this machine, one busy at a time, 2 threads each, greedy, the same
prompts and --tokens per request; the order rotates every round):

  plain        minionsd, spec.enabled false
  single       minionsd, the best single drafter for the set (each model draft and the n-gram one)
               at its best fixed spec.length (2, 4, 6 or 8, by throughput, from a sweep in the same
               run before the rounds, per set and client count; the client sweep uses 1 client's
               for 1 and the many clients' for the rest)
  +vote        the same minionsd: the vote of all four drafters (sequence weights, skip_below 0.25)
               at that length
  +adaptive    a second minionsd, --tuner adaptive, the vote
  +pipeline    a third minionsd, --tuner adaptive --pipeline --draft-threads 1, the vote
  llama.cpp    llama-server (-np 16), plain
  llama.cpp-spec  llama-server with the set's best model draft (-md, --draft-max or, in newer
                  llama.cpp, --spec-draft-n-max = that length)

The ablation is plain -> single -> +vote -> +adaptive -> +pipeline; each step's gain in %. For
1 and --clients-many clients on every set, and a client sweep (--sweep, on --sweep-set) for
plain, +vote, +pipeline and both llama.cpp systems. Throughput = generated tokens / wall time;
normalized latency = mean over requests of (request latency / its tokens). Figures (gnuplot) go to
docs/: eval-latency.png (Figure 8: normalized latency by system and set, 1 client), eval-throughput.png
(Figure 9: throughput by system and set, many clients), eval-ablation.png (Figure 10: ablation
bars), eval-clients.png (the sweep); tables to build/bench-eval/results.md and README.

    tools/bench-eval.py --llama /tmp/llama/build/bin [--rounds 5] [--warmup 1] [--tokens 64]
                         [--sets kjv,web,devil,mixed]

Before the measured rounds, --warmup rounds of the same jobs whose figures are dropped: the base
server has served the single drafters' sweep by then, and the others, the adaptive tuner and the
vote's weights among them, get traffic of their own to learn from, as a running server has.

Needs build/minionsd, build/minions-bench, build/minions-cli and llama.cpp's llama-server (built
here from its source, see docs/speculation.md; nothing is downloaded).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

spec = import_module("bench-spec")  # the minionsd Server helper and run_bench
minionsd = spec.minionsd
llamacpp_spec = import_module("bench-llamacpp-spec")  # draft_length_flags: the flags differ by version
ROOT, BIN, DRAFTS = spec.ROOT, spec.BIN, spec.DRAFTS
MODELS = [d for d in DRAFTS if d != "ngram"]
ABLATION = ["plain", "single", "+vote", "+adaptive", "+pipeline"]
SYSTEMS = ABLATION + ["llama.cpp", "llama.cpp-spec"]
LENGTHS = (2, 4, 6, 8)  # the single drafter's sweep
SWEEP_SYSTEMS = ["plain", "+vote", "+pipeline", "llama.cpp", "llama.cpp-spec"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Llama:
    """llama-server on the bundled target, plain or with one draft; the same run() as minionsd."""

    def __init__(self, llama_bin, threads, slots, draft=None, draft_max=4):
        self.port = free_port()
        args = [os.path.join(llama_bin, "llama-server"), "-m", os.path.join(ROOT, "models/target.gguf"),
                "--port", str(self.port), "-t", str(threads), "-tb", str(threads), "-np", str(slots),
                "-c", str(1024 * slots), "--log-disable"]
        if draft:
            n_max, n_min = llamacpp_spec.draft_length_flags(args[0])
            args += ["-md", os.path.join(ROOT, "models", draft + ".gguf"), n_max, str(draft_max), n_min, "0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("llama-server did not start")

    def run(self, prompts_file, clients, requests, tokens):
        """minions-bench, the client of every minionsd run, over llama-server's OpenAI API (each
        request prefilled: cache_prompt false)."""
        return minionsd.bench(f"127.0.0.1:{self.port}", prompts_file, clients, requests, tokens, "--http",
                              "--extra", json.dumps({"cache_prompt": False}))

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Minions:
    """A minionsd (bench-spec's Server) with a fixed drafter configuration per system."""

    def __init__(self, args, extra=()):
        # no shared n-gram cache: the rounds repeat their prompts, whose text it would hold
        self.srv = spec.Server(4, args.threads, 16, extra=list(extra) + ["--ngram-cache", "0"])

    def configure(self, drafters, length):
        """drafters: None (plain), a drafter's name, or 'vote' (all four, sequence weights + skip)."""
        s = self.srv
        s.set("spec.enabled", drafters is not None)
        for d in DRAFTS:
            s.set(f"drafter.{d}.enabled", drafters in ("vote", d))
        s.set("spec.weights", "sequence")
        s.set("spec.skip_below", spec.SKIP if drafters == "vote" else 0)
        s.set("spec.length", length)

    def run(self, prompts_file, clients, requests, tokens):
        return spec.run_bench(self.srv, prompts_file, clients, requests, tokens)

    def stop(self):
        self.srv.stop()


def prompts_of(s):
    return os.path.join(ROOT, "prompts", s + ".jsonl")


def requests_for(args, clients):
    return max(args.requests1, 2 * clients) if clients > 1 else args.requests1


def sweep_single(args, m, s, clients):
    """The best single drafter and fixed length for set s at this client count: (drafter, s, tok/s)."""
    best = None
    for d in DRAFTS:
        for length in LENGTHS:
            m.configure(d, length)
            tps = m.run(prompts_of(s), clients, requests_for(args, clients), args.tokens)["tok_per_s"]
            if not best or tps > best[2]:
                best = (d, length, tps)
    print(f"  {s}, {clients} client(s): best single {best[0]} at s={best[1]} ({best[2]:.0f} tok/s)",
          file=sys.stderr, flush=True)
    return best


class Bench:
    def __init__(self, args):
        self.args = args
        self.base = Minions(args)
        self.adaptive = Minions(args, ["--tuner", "adaptive"])
        self.pipe = Minions(args, ["--tuner", "adaptive", "--pipeline", "--draft-threads", "1"])
        for m in (self.adaptive, self.pipe):
            m.configure("vote", 4)
        self.llama_plain = Llama(args.llama, args.threads, 16)
        self.llama_spec = {}  # (draft, length) -> Llama, started on first use

    def llama_for(self, draft, length):
        key = (draft, length)
        if key not in self.llama_spec:
            self.llama_spec[key] = Llama(self.args.llama, self.args.threads, 16, draft, length)
        return self.llama_spec[key]

    def run(self, system, s, clients, best):
        """One measurement of system on set s; best = (drafter, length) of the single drafter."""
        a = self.args
        drafter, length = best
        model_draft = drafter if drafter in MODELS else {"kjv": "draft-kjv", "web": "draft-web",
                                                         "devil": "draft-devil"}.get(s, "draft-kjv")
        if system in ("plain", "single", "+vote"):
            self.base.configure({"plain": None, "single": drafter, "+vote": "vote"}[system], length)
            srv = self.base
        elif system == "+adaptive":
            srv = self.adaptive
        elif system == "+pipeline":
            srv = self.pipe
        elif system == "llama.cpp":
            srv = self.llama_plain
        else:
            srv = self.llama_for(model_draft, length)
        return srv.run(prompts_of(s), clients, requests_for(a, clients), a.tokens)

    def stop(self):
        for srv in [self.base, self.adaptive, self.pipe, self.llama_plain] + list(self.llama_spec.values()):
            srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", required=True, help="llama.cpp's bin directory (llama-server)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="rounds served first and not measured")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests1", type=int, default=6, help="requests of a 1-client run")
    ap.add_argument("--clients-many", type=int, default=16)
    ap.add_argument("--sets", default="kjv,web,devil,mixed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sweep", default="1,4,8,16,32", help="client counts of the sweep ('' = none)")
    ap.add_argument("--sweep-set", default="mixed")
    ap.add_argument("--sweep-rounds", type=int, default=3)
    args = ap.parse_args()
    sets = args.sets.split(",")
    counts = [1, args.clients_many]
    sweep = [int(c) for c in args.sweep.split(",") if c]
    bench = Bench(args)
    res, best = {}, {}
    try:
        print("sweeping the single drafters", file=sys.stderr, flush=True)
        for s in sets:
            for c in counts:
                best[(s, c)] = sweep_single(args, bench.base, s, c)
        if sweep and args.sweep_set not in sets:
            for c in counts:
                best[(args.sweep_set, c)] = sweep_single(args, bench.base, args.sweep_set, c)
        jobs = [(s, c, sysname) for s in sets for c in counts for sysname in SYSTEMS]
        jobs += [("sweep", c, sysname) for c in sweep for sysname in SWEEP_SYSTEMS]
        # --warmup rounds first, measured by no one: every system has served traffic before its
        # rounds count, as the base server has in the sweep (the adaptive tuner and the vote's
        # weights learn from it, as a running server's have)
        for r in range(-args.warmup, max(args.rounds, args.sweep_rounds)):
            for s in sets + (["sweep"] if sweep else []):
                rounds = args.sweep_rounds if s == "sweep" else args.rounds
                if r >= rounds:
                    continue
                mine = [j for j in jobs if j[0] == s]
                k = r % len(mine)
                for set_name, c, sysname in mine[k:] + mine[:k]:
                    real = args.sweep_set if set_name == "sweep" else set_name
                    d, length, _ = best[(real, 1 if c == 1 else args.clients_many)]
                    summary = bench.run(sysname, real, c, (d, length))
                    if r >= 0:
                        res.setdefault((set_name, c, sysname), []).append(summary)
            print(f"round {r + 1} done" if r >= 0 else "warm-up round done", file=sys.stderr, flush=True)
    finally:
        bench.stop()
    report(args, sets, counts, sweep, res, best)


def med(res, key, field):
    return statistics.median(x[field] for x in res[key])


def report(args, sets, counts, sweep, res, best):
    out = os.path.join(BIN, "bench-eval")
    os.makedirs(out, exist_ok=True)
    cmd = " ".join(["tools/bench-eval.py"] + sys.argv[1:])
    lines = [f"Bundled target, {args.tokens} tokens per request, greedy, {args.threads} threads per server; median "
             f"of {args.rounds} alternating rounds (`{cmd}`). x plain = throughput / minions plain's; latency is "
             "the mean normalized latency (ms per output token).", ""]
    table = {}
    for c in counts:
        lines += [f"### {c} client{'s' if c > 1 else ''}", "",
                  "| system | " + " | ".join(f"{s} tok/s | x plain | ms/token" for s in sets) + " |",
                  "|---|" + "---:|" * (3 * len(sets))]
        for sysname in SYSTEMS:
            row = []
            for s in sets:
                tps, lat = med(res, (s, c, sysname), "tok_per_s"), med(res, (s, c, sysname), "norm_latency_ms")
                plain = med(res, (s, c, "plain"), "tok_per_s")
                table[f"{s}/{c}/{sysname}"] = {"tok_per_s": tps, "norm_latency_ms": lat, "x_plain": tps / plain}
                row.append(f"{tps:.0f} | {tps / plain:.2f}x | {lat:.2f}")
            lines.append(f"| {sysname} | " + " | ".join(row) + " |")
        lines += ["", "Best single drafter (drafter, s): " +
                  ", ".join(f"{s}: {best[(s, c)][0]} s={best[(s, c)][1]}" for s in sets), ""]
        lines += ["Ablation, each step's throughput gain over the step before:", "",
                  "| set | " + " | ".join(ABLATION[1:]) + " |", "|---|" + "---:|" * (len(ABLATION) - 1)]
        for s in sets:
            t = [table[f"{s}/{c}/{x}"]["tok_per_s"] for x in ABLATION]
            lines.append(f"| {s} | " + " | ".join(f"{100 * (t[i] / t[i - 1] - 1):+.1f}%" for i in range(1, len(t))) +
                         " |")
        lines.append("")
    if sweep:
        lines += [f"### Clients sweep, {args.sweep_set} (median of {args.sweep_rounds} rounds), tok/s", "",
                  "| system | " + " | ".join(str(c) for c in sweep) + " |", "|---|" + "---:|" * len(sweep)]
        for sysname in SWEEP_SYSTEMS:
            lines.append(f"| {sysname} | " + " | ".join(f"{med(res, ('sweep', c, sysname), 'tok_per_s'):.0f}"
                                                       for c in sweep) + " |")
            for c in sweep:
                table[f"sweep/{c}/{sysname}"] = {"tok_per_s": med(res, ("sweep", c, sysname), "tok_per_s")}
        lines.append("")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"table": table, "best": {f"{s}/{c}": v for (s, c), v in best.items()}}, f, indent=1)
    print("\n".join(lines))
    plot(args, sets, counts, sweep, table, out)


def write_columns(data, first, series, rows, value):
    """A gnuplot data file: a header (first, then each series' name), then a line per row: its key,
    then value(row, series) for each series."""
    with open(data, "w") as f:
        f.write(f"{first} " + " ".join(f'"{x}"' for x in series) + "\n")
        for key, row in rows:
            f.write(f"{key} " + " ".join(f"{value(row, x):.4f}" for x in series) + "\n")


def bars(data, png, title, ylabel, groups, series, value):
    """Clustered bars: one cluster per group, one bar per series."""
    write_columns(data, "group", series, [(f'"{g}"', g) for g in groups], value)
    script = f"""set terminal pngcairo size 1000,420
set output '{png}'
set title "{title}"
set ylabel '{ylabel}'
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key outside right
set yrange [0:*]
set grid ytics
plot for [i=2:{len(series) + 1}] '{data}' using i:xtic(1) title columnheader(i), 1 with lines dt 2 lc 'gray' notitle
"""
    spec.gnuplot(script)


def plot(args, sets, counts, sweep, table, out):
    docs = os.path.join(ROOT, "docs")
    many = counts[-1]
    norm_lat = lambda c: lambda s, x: table[f"{s}/{c}/{x}"]["norm_latency_ms"] / table[f"{s}/{c}/plain"]["norm_latency_ms"]
    bars(os.path.join(out, "latency.dat"), os.path.join(docs, "eval-latency.png"),
         "Normalized latency / minions plain decoding, 1 client (lower is better)", "latency / plain", sets, SYSTEMS,
         norm_lat(1))
    bars(os.path.join(out, "throughput.dat"), os.path.join(docs, "eval-throughput.png"),
         f"Throughput / minions plain decoding, {many} clients (higher is better)", "throughput / plain", sets,
         SYSTEMS, lambda s, x: table[f"{s}/{many}/{x}"]["x_plain"])
    groups = [f"{s}/{c}" for c in counts for s in sets]
    bars(os.path.join(out, "ablation.dat"), os.path.join(docs, "eval-ablation.png"),
         "Ablation: throughput / plain, by set and clients", "throughput / plain", groups, ABLATION,
         lambda g, x: table[f"{g}/{x}"]["x_plain"])
    if sweep:
        data = os.path.join(out, "clients.dat")
        write_columns(data, "clients", SWEEP_SYSTEMS, [(c, c) for c in sweep],
                      lambda c, x: table[f"sweep/{c}/{x}"]["tok_per_s"])
        script = f"""set terminal pngcairo size 900,420
set output '{os.path.join(docs, "eval-clients.png")}'
set title "Throughput by concurrent clients, {args.sweep_set} prompts"
set xlabel 'clients'
set ylabel 'tok/s'
set logscale x 2
set key outside right
set grid
plot for [i=2:{len(SWEEP_SYSTEMS) + 1}] '{data}' using 1:i with linespoints title columnheader(i)
"""
        spec.gnuplot(script)
    if shutil.which("gnuplot"):
        print("plots: docs/eval-latency.png docs/eval-throughput.png docs/eval-ablation.png docs/eval-clients.png")


if __name__ == "__main__":
    main()
