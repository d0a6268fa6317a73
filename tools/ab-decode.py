#!/usr/bin/env python3
"""ab-decode.py: two or more builds of minions-bench-decode side by side, in alternating rounds.

    tools/ab-decode.py --rounds 10 --models a.gguf,b.gguf old=/tmp/old/minions-bench-decode new=build/minions-bench-decode
    tools/ab-decode.py --verify-curve --rounds 8 --batches 1,4,16 --models models/target.gguf old=... new=...
    tools/ab-decode.py --prefill 128 --rounds 6 --models models/target.gguf old=... new=...

Each round runs every build on every model (the order of the builds reversed every other round, so
drift on a shared machine hits them alike). Default: decode tok/s of --batches sequences (16-token
prompts, 48 tokens), printed as each build's median and its median ratio to the first build,
round by round. With --verify-curve: the median time of a pass of k = 1..8 new tokens after 64
tokens for each of --batches' sequence counts (minions-bench-decode --verify-curve --rounds 6 per
run), and its median ratio to the first build's. With --prefill N: prefill tok/s of
an N-token prompt, the median of the three timed passes of each run (--repeat 3, after the
warm-up). This is how the kernel commits of 2026-11-26 compared their builds (the earlier one
built in a git worktree). Last, the range of the cores' round trip that the builds printed (since
ae9ffaf): on the shared hosts here a two-thread pass runs 1.3-1.4x slower while the two vCPUs are
apart (docs/runtime.md, "Two kinds of hours"), so a comparison says which hours it ran in.
"""
import argparse
import re
import statistics
import subprocess


TRIPS = []  # the cores' round trips the builds printed (ns), every run's


def trips(out):
    """Keep the round trips a run printed (builds since ae9ffaf print them) and return out."""
    TRIPS.extend(float(v) for v in re.findall(r"round trip (\d+) ns", out))
    return out


def run(binary, model, args):
    cmd = [binary, "--model", model, "--threads", str(args.threads)]
    if args.verify_curve:
        out = trips(subprocess.run(cmd + ["--verify-curve", "--batches", args.batches, "--rounds", "6", "--ctx-tokens",
                                          "64"], capture_output=True, text=True, check=True).stdout)
        return {(int(s), int(k)): float(t) for s, k, t in re.findall(r"seqs\s+(\d+) k (\d)\s+([\d.]+) us", out)}
    if args.prefill:
        out = trips(subprocess.run(cmd + ["--prompt-tokens", str(args.prefill), "--gen-tokens", "1", "--batches", "1",
                                          "--repeat", "3"], capture_output=True, text=True, check=True).stdout)
        return statistics.median(float(v) for v in re.findall(r"prefill\s+\d+ tokens\s+([\d.]+)", out))
    out = trips(subprocess.run(cmd + ["--prompt-tokens", "16", "--gen-tokens", "48", "--batches", str(args.batches)],
                               capture_output=True, text=True, check=True).stdout)
    return float(re.search(rf"decode\s+batch\s+{args.batches} x\s+\d+ tokens\s+([\d.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="NAME=PATH of a minions-bench-decode; the first is the base")
    ap.add_argument("--models", required=True, help="comma-separated GGUF files")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1",
                    help="sequences decoding together (with --verify-curve, a comma-separated list)")
    ap.add_argument("--verify-curve", action="store_true")
    ap.add_argument("--prefill", type=int, default=0, help="prefill tok/s of an N-token prompt instead")
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.builds]
    models = args.models.split(",")
    res = {}
    for r in range(args.rounds):
        for m in models:
            for name, path in builds if r % 2 == 0 else builds[::-1]:
                res.setdefault((m, name), []).append(run(path, m, args))
    base = builds[0][0]
    for m in models:
        print(m)
        for name, _ in builds:
            v = res[(m, name)]
            if args.verify_curve:
                for seqs in sorted({s for s, _ in v[0]}):
                    print(f"  {name} seqs {seqs}: " + " ".join(
                        f"k{k} {statistics.median(x[(seqs, k)] for x in v):.0f} us "
                        f"({statistics.median(x[(seqs, k)] / y[(seqs, k)] for x, y in zip(v, res[(m, base)])):.2f}x)"
                        for k in range(1, 9)))
            else:
                ratio = statistics.median(a / b for a, b in zip(v, res[(m, base)]))
                print(f"  {name}: {statistics.median(v):.1f} tok/s ({ratio:.3f}x {base})")
    if TRIPS:  # which kind of hours the rounds ran in (docs/runtime.md, "Two kinds of hours")
        far = sum(t > 250 for t in TRIPS)
        print(f"cores' round trip: {min(TRIPS):.0f}-{max(TRIPS):.0f} ns over the runs, {far} of {len(TRIPS)} "
              "readings above 250 ns (the vCPUs apart)")


if __name__ == "__main__":
    main()
