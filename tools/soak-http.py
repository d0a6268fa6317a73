#!/usr/bin/env python3
"""soak-http.py: a soak of minionsd's OpenAI API whose end state is checked, as tools/soak.sh is for
the JSON-lines protocol.

Starts minionsd with --http on an ephemeral port, a small KV pool (preemption), a small batch and a
small output buffer (throttling), and runs client threads that each pick, request by request:
whole and streamed completions and chat completions (greedy: every answer to the same prompt and
max_tokens must be the same text, whole or streamed, whatever else runs beside it), several choices
(a list of prompts, n), token-id prompts, streams dropped after their first bytes, requests cut off
halfway, bad bodies (a 400 in OpenAI's shape), readers that stall (paused, their KV taken back when
the pool runs dry), and keep-alive connections that carry several requests. At the end the KV
pools must be empty and no request left in flight (admin `stats`), and SIGTERM must end minionsd
with status 0. tests/soak-http-short.sh runs 400 requests of it in make check.

    tools/soak-http.py [--requests 2000] [--clients 16] [--seed 1] [--bin build]
                       [--drafts "draft-kjv ngram"] [--server-arg=--pipeline ...]

The last line is `soak-http: N passed, M failed`; exit 0 when nothing failed. minionsd's stderr is
kept in the folder printed on failure. Needs build/minionsd and build/minions-cli (or --bin); starts
the daemon with tools/minionsd.py.
"""
import argparse
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time

import minionsd
from minionsd import ROOT

PROMPTS = ["In the beginning", "And God said", "DEVIL, n.", "The LORD is my shepherd",
           "Web pages load", "ABSURDITY, n.", "Blessed are the meek", "Search results"]
TOKEN_PROMPTS = [[40, 300, 500], [41, 42], [100, 200, 300, 400, 500, 600]]  # ids below any vocabulary's size


class Checks:
    """Named checks, each counted over every time it is asked (a request's answer, a stream's end):
    the summary says which held every time, as tools/soak.sh's checks do."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}  # name -> [times held, times failed]
        self.texts = {}  # (kind, prompt, max_tokens) -> the greedy text first seen

    def ok(self, cond, name, detail=""):
        with self.lock:
            c = self.counts.setdefault(name, [0, 0])
            c[0 if cond else 1] += 1
            if not cond and c[1] <= 5:
                print(f"soak-http: FAIL {name}: {detail}", file=sys.stderr, flush=True)
        return cond

    def same_text(self, key, text):
        with self.lock:
            first = self.texts.setdefault(key, text)
        return self.ok(first == text, "a greedy answer is the same text every time, whole or streamed",
                       f"{key}: {text!r} after {first!r}")

    def summary(self):
        for name, (held, failed) in sorted(self.counts.items()):
            print(f"soak-http: {'ok  ' if not failed else 'FAIL'} {name} ({held} of {held + failed})", file=sys.stderr)
        failed = sum(1 for _, f in self.counts.values() if f)
        return len(self.counts) - failed, failed


def request(path, body, keep_alive=False):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}\r\n")
    return head.encode() + data


def recv_more(sock, buf, where):
    d = sock.recv(65536)
    if not d:
        raise ConnectionError(f"closed {where}")
    return buf + d


def read_reply(sock, buf=b""):
    """One HTTP reply (Content-Length or chunked) from sock: (status, body bytes, rest)."""
    while b"\r\n\r\n" not in buf:
        buf = recv_more(sock, buf, "before the head")
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "content-length" in fields:
        n = int(fields["content-length"])
        while len(buf) < n:
            buf = recv_more(sock, buf, "inside the body")
        return status, buf[:n], buf[n:]
    body = b""
    while True:  # chunked
        while b"\r\n" not in buf:
            buf = recv_more(sock, buf, "inside a chunk's size")
        size_line, buf = buf.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(buf) < size + 2:
            buf = recv_more(sock, buf, "inside a chunk")
        body, buf = body + buf[:size], buf[size + 2:]
        if size == 0:
            return status, body, buf


def stream_texts(body, chat):
    """Each choice's text in a server-sent-event stream (by index), and whether it ended with [DONE]."""
    texts, done = {}, False
    for ev in body.decode().split("\n\n"):
        if not ev.startswith("data: "):
            continue
        payload = ev[6:]
        if payload == "[DONE]":
            done = True
            continue
        for c in json.loads(payload).get("choices", []):
            piece = c.get("delta", {}).get("content") if chat else c.get("text")
            texts[c.get("index", 0)] = texts.get(c.get("index", 0), "") + (piece or "")
    return texts, done


def stream_text(body, chat):
    """The text of a one-choice stream, and whether it ended with [DONE]."""
    texts, done = stream_texts(body, chat)
    return texts.get(0, ""), done


class Client(threading.Thread):
    def __init__(self, port, checks, rng, count):
        super().__init__()
        self.port, self.checks, self.rng, self.count = port, checks, rng, count

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        return s

    def call(self, path, body):
        s = self.connect()
        try:
            s.sendall(request(path, body))
            return read_reply(s)[:2]
        finally:
            s.close()

    def completion(self, stream, chat):
        prompt = self.rng.choice(PROMPTS)
        n = self.rng.randint(1, 24)
        body = {"max_tokens": n, "temperature": 0, "stream": stream}
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        status, data = self.call("/v1/chat/completions" if chat else "/v1/completions", body)
        if not self.checks.ok(status == 200, "a good request is a 200", f"HTTP {status} {data[:200]!r}"):
            return
        if stream:
            text, done = stream_text(data, chat)
            self.checks.ok(done, "a stream ends with [DONE]")
        else:
            o = json.loads(data)
            c = o["choices"][0]
            text = c["message"]["content"] if chat else c["text"]
            self.checks.ok(o["usage"]["completion_tokens"] <= n, "usage within max_tokens")
            self.checks.ok(c["finish_reason"] in ("length", "stop"), "finish_reason length or stop", c["finish_reason"])
        self.checks.same_text(("chat" if chat else "completion", prompt, n), text)

    def several(self):
        prompts = self.rng.sample(PROMPTS, 2)
        body = {"prompt": prompts, "n": 2, "max_tokens": 8, "temperature": 0}
        status, data = self.call("/v1/completions", body)
        if self.checks.ok(status == 200, "a good request is a 200", f"several: HTTP {status} {data[:200]!r}"):
            o = json.loads(data)
            self.checks.ok(len(o["choices"]) == 4, "prompts x n choices", str(len(o["choices"])))
            for c in o["choices"]:
                self.checks.same_text(("completion", prompts[c["index"] // 2], 8), c["text"])

    def token_prompt(self):
        ids = self.rng.choice(TOKEN_PROMPTS)
        status, data = self.call("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0})
        if self.checks.ok(status == 200, "a good request is a 200", f"token prompt: HTTP {status} {data[:200]!r}"):
            self.checks.same_text(("tokens", tuple(ids), 8), json.loads(data)["choices"][0]["text"])

    def dropped_stream(self):
        s = self.connect()
        body = {"prompt": self.rng.choice(PROMPTS), "max_tokens": 200, "stream": True,
                "n": self.rng.randint(1, 3), "temperature": 0.8}
        s.sendall(request("/v1/completions", body))
        s.recv(self.rng.randint(1, 300))
        s.close()

    def cut_request(self):
        s = self.connect()
        data = request("/v1/completions", {"prompt": "In the", "max_tokens": 8})
        s.sendall(data[:self.rng.randint(1, len(data) - 1)])
        s.close()

    def bad_body(self):
        body = self.rng.choice([b"{not json", b"[]", json.dumps({"prompt": ""}).encode(),
                                json.dumps({"prompt": "x", "max_tokens": -1}).encode(),
                                json.dumps({"prompt": [1, "a"]}).encode(),
                                json.dumps({"prompt": [10 ** 6], "max_tokens": 2}).encode(),
                                json.dumps({"messages": []}).encode()])
        path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
        status, data = self.call(path, body)
        ok = status == 400
        try:
            ok = ok and "message" in json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            ok = False
        self.checks.ok(ok, "a bad body is a 400 in OpenAI's shape", f"{status} {data[:200]!r}")

    def stalled_reader(self):
        """A stream not read for a while, then read to its end: the server pauses it (its output
        buffer full), may take its KV back when the pool runs dry, and must still send what greedy
        decoding gives."""
        s = self.connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        prompt = self.rng.choice(PROMPTS)
        body = {"prompt": prompt, "max_tokens": 160, "n": 2, "stream": True, "temperature": 0}
        s.sendall(request("/v1/completions", body))
        time.sleep(self.rng.uniform(0.05, 0.5))
        try:
            status, data, _ = read_reply(s)
        finally:
            s.close()
        if self.checks.ok(status == 200, "a good request is a 200", f"stalled reader: {status} {data[:200]!r}"):
            texts, done = stream_texts(data, False)
            self.checks.ok(done, "a stream ends with [DONE]", "a stalled reader's")
            self.checks.ok(len(texts) == 2, "prompts x n choices", f"a stalled reader's stream: {len(texts)}")
            for text in texts.values():
                self.checks.same_text(("completion", prompt, 160), text)

    def keep_alive(self):
        s = self.connect()
        rest = b""
        try:
            for _ in range(self.rng.randint(2, 4)):
                prompt = self.rng.choice(PROMPTS)
                s.sendall(request("/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0},
                                  keep_alive=True))
                status, data, rest = read_reply(s, rest)
                if not self.checks.ok(status == 200, "a good request is a 200", f"keep-alive: HTTP {status}"):
                    return
                self.checks.same_text(("completion", prompt, 4), json.loads(data)["choices"][0]["text"])
        finally:
            s.close()

    def run(self):
        actions = [(self.completion, (False, False), 20), (self.completion, (True, False), 15),
                   (self.completion, (False, True), 8), (self.completion, (True, True), 7),
                   (self.several, (), 8), (self.token_prompt, (), 6), (self.dropped_stream, (), 10),
                   (self.cut_request, (), 6), (self.bad_body, (), 8), (self.stalled_reader, (), 4),
                   (self.keep_alive, (), 8)]
        weights = [w for _, _, w in actions]
        for _ in range(self.count):
            fn, args, _ = self.rng.choices(actions, weights)[0]
            try:
                fn(*args)
                self.checks.ok(True, "every exchange completes")
            except (OSError, ValueError, KeyError, IndexError) as e:
                self.checks.ok(False, "every exchange completes", f"{fn.__name__}: {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.environ.get("MINIONS_BIN_DIR") or os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/target.gguf"))
    ap.add_argument("--drafts", default="", help="drafters by name (ngram, or models/NAME.gguf), separated by spaces")
    ap.add_argument("--server-arg", action="append", default=[], help="one more minionsd argument")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="minions-soak-http-")
    err_path = os.path.join(tmp, "minionsd.err")
    with open(err_path, "w") as err:
        srv = minionsd.Server(["--model", args.model, "--http", "127.0.0.1:0", "--threads", "2", "--max-batch", "8",
                               "--kv-blocks", "24", "--output-buffer", "4", "--drain-timeout", "30"]
                              + minionsd.draft_args(args.drafts.split()) + args.server_arg,
                              bindir=args.bin, stderr=err)
    try:
        port = srv.http_port
        print(f"soak-http: minionsd pid {srv.proc.pid}, http port {port}; {args.requests} requests,"
              f" {args.clients} clients, seed {args.seed}; drafts: {args.drafts or 'none'}", file=sys.stderr)

        checks = Checks()
        rng = random.Random(args.seed)
        per = [args.requests // args.clients + (i < args.requests % args.clients) for i in range(args.clients)]
        t0 = time.monotonic()
        clients = [Client(port, checks, random.Random(rng.random()), per[i]) for i in range(args.clients)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        wall = time.monotonic() - t0

        # the end state: every pool empty, no request left anywhere (a dropped client's state is freed)
        names = "target KV, draft KV, HTTP requests in flight, requests in flight, running, queued"
        state = None
        for _ in range(300):
            st = srv.stats()
            state = (st["kv"]["target"]["used"], st["kv"].get("drafts", {}).get("used", 0), st["http"]["in_flight"],
                     st["requests"]["in_flight"], st["requests"]["running"], st["requests"]["queued"])
            if not any(state):
                break
            time.sleep(0.1)
        checks.ok(not any(state), "idle at the end: KV and requests back to 0", f"{names} = {state}")
        checks.ok(st["http"]["done"] > 0, "HTTP requests were served")
        rc = srv.stop(timeout=60)
        checks.ok(rc == 0, "minionsd exits 0 after SIGTERM", "killed after 60 s" if rc is None else str(rc))
        with open(err_path) as f:
            errors = [ln for ln in f if "ERROR" in ln or "Sanitizer" in ln]
        checks.ok(not errors, "no error or sanitizer report on minionsd's stderr", str(errors[:5]))
        print(f"soak-http: {args.requests} requests in {wall:.1f} s, {len(checks.texts)} distinct greedy answers;"
              f" server: {st['http']['done']} HTTP requests done, {st['http']['failed']} failed,"
              f" {st['preemptions']} preemptions", file=sys.stderr)
        passed, failed = checks.summary()
        if failed:
            print(f"soak-http: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp)
        print(f"soak-http: {passed} passed, {failed} failed")
        return 0 if failed == 0 else 1
    finally:  # an exception (a stats query that failed) must not leave the daemon running
        if srv.proc.poll() is None:
            srv.proc.kill()


if __name__ == "__main__":
    sys.exit(main())
