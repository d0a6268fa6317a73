#!/usr/bin/env python3
"""bench-overhead.py: what the actors cost beside the model work, sampled with perf.

Starts one minionsd with the three bundled drafts and the n-gram drafter voting (the default
configuration, greedy), loads it with minions-bench (1 client, then 16) over a prompt set, and
samples the process with `perf record` (cpu-clock, every thread). The loop thread (its tid is the
process id) runs every actor, the sockets and the n-gram drafter; the compute worker (`mn-compute`)
and the pool's other threads run the model passes. Printed per load: the loop thread's CPU time as
a share of the compute worker's (the step time: on the CPU the loop's work sits between two passes,
so this is what control adds to a round), split by what it was doing: voter (actors/voter.c,
spec/vote.c, spec/weights.c), tuner (actors/tuner.c, spec/tuner.c), messaging and the other actors
(runtime/mailbox.c, the other actors, the rest of src/), the client actor, the requests'
bookkeeping and their text (actors/client.c: lines in, replies out; actors/request.c: the text,
stop strings, the request's states; model/tokenizer.c: prompts in, token pieces out: work a server
does whatever its structure, listed apart from control), the client sockets and JSON (net/conn.c,
net/proto.c, jansson), the kernel and the libraries (mailbox wakeups, epoll, socket I/O; libevent,
libc, jemalloc: code without line information or outside src/), and the n-gram drafter's
proposals (drafting, not control).

    tools/bench-overhead.py [--prompts prompts/mixed.jsonl] [--requests 24] [--tokens 64]

Needs perf (Debian: linux-perf) with permission to sample the process, and a built tree (make).
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time

import minionsd
from minionsd import ROOT

DRAFTS = ["draft-kjv", "draft-web", "draft-devil", "ngram"]

# the loop thread's samples, by source file, into what the issue asks about; a file outside src/ (glibc
# ships line information too: epoll_wait.c, memmove) is a library's
CATEGORIES = [
    ("voter", ("voter.c", "vote.c", "weights.c")),
    ("tuner", ("tuner.c",)),
    ("n-gram drafting", ("ngram.c",)),
    ("client actor, requests, text", ("client.c", "request.c", "tokenizer.c")),
    ("sockets and JSON", ("conn.c", "proto.c", "dump.c", "load.c", "value.c", "hashtable.c", "strbuffer.c",
                          "utf.c", "pack_unpack.c", "utf8proc.c")),
]
OURS = {f for _, _, files in os.walk(os.path.join(ROOT, "src")) for f in files}


def categorize(srcfile):
    for name, files in CATEGORIES:
        if srcfile in files:
            return name
    return "messaging and the other actors" if srcfile in OURS else "kernel and libraries"


def sample(pid, run, seconds_out):
    data = tempfile.mktemp(prefix="minions-perf-", suffix=".data")
    perf = subprocess.Popen(["perf", "record", "-F", "4999", "-p", str(pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    t0 = time.time()
    run()
    seconds_out.append(time.time() - t0)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "pid,srcfile", "--stdio",
                          "-F", "sample,pid,srcfile"], capture_output=True, text=True, check=True).stdout
    os.unlink(data)
    per = collections.Counter()  # (thread role, category) -> samples
    for line in rep.splitlines():
        parts = line.split()
        if not parts or line.startswith("#") or not parts[0].isdigit():
            continue
        n, tid = int(parts[0]), parts[1].split(":")[0]
        comm = parts[1].split(":", 1)[1] if ":" in parts[1] else ""
        src = parts[2].split(":")[0] if len(parts) > 2 else ""
        if tid == str(pid):
            per[("loop", categorize(src))] += n
        else:
            per[("compute" if comm == "mn-compute" else "pool", "")] += n
    return per


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default=os.path.join(ROOT, "prompts", "mixed.jsonl"))
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    cmd = ["--max-batch", "16"] + minionsd.draft_args(DRAFTS)
    srv = minionsd.Server(cmd, admin=False)
    try:
        print(f"minionsd {' '.join(cmd)}; {args.requests} requests of {args.tokens} tokens, "
              f"{os.path.relpath(args.prompts, ROOT)}, greedy; perf cpu-clock at 4999 Hz\n")
        print("| clients | wall s | loop / compute-worker CPU | voter | tuner | messaging, other actors "
              "| client actor, requests, text | sockets, JSON | kernel, libraries | n-gram drafting |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for clients in (1, 16):
            run = lambda: minionsd.bench(srv.addr, args.prompts, clients, args.requests, args.tokens)
            secs = []
            per = sample(srv.proc.pid, run, secs)
            compute = per[("compute", "")]
            share = lambda cat: 100.0 * per[("loop", cat)] / max(compute, 1)
            loop = sum(v for (role, _), v in per.items() if role == "loop")
            cats = ["voter", "tuner", "messaging and the other actors", "client actor, requests, text", "sockets and JSON",
                    "kernel and libraries", "n-gram drafting"]
            print(f"| {clients} | {secs[0]:.2f} | {100.0 * loop / max(compute, 1):.2f}% | " +
                  " | ".join(f"{share(c):.2f}%" for c in cats) + " |")
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
