"""minionsd.py: what the bench tools share to run minions: where its binaries are, a minionsd they
start and talk to over its admin socket, and minions-bench runs against it.

    import minionsd                                   # from a script in tools/
    srv = minionsd.Server(["--model", "models/target.gguf", *minionsd.draft_args(["ngram"])])
    srv.set("spec.length", 4)
    summary = minionsd.bench(srv.addr, "prompts/kjv.jsonl", clients=1, requests=8, tokens=64)
    srv.stop()
"""
import json
import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("MINIONS_BIN_DIR") or os.path.join(ROOT, "build")


def draft_args(names):
    """minionsd's --draft arguments for drafters by name: ngram, or models/NAME.gguf."""
    args = []
    for d in names:
        args += ["--draft", d if d == "ngram" else os.path.join(ROOT, "models", d + ".gguf")]
    return args


class Server:
    """A minionsd with `args` (model, drafters, options) on a free TCP port; with admin, an admin
    socket in a directory of its own. bindir: another build's binaries; stderr: where the daemon's
    goes (a file), else this process's. http_port: its --http port, when args ask for one on
    127.0.0.1. stop() sends SIGTERM, which drains the engine and frees it (a --step-trace is
    complete once stop returns), and returns the exit status."""

    def __init__(self, args, admin=True, bindir=None, stderr=None):
        self.bindir = bindir or BIN
        self.dir = tempfile.mkdtemp(prefix='minionsd-') if admin else None
        self.admin_addr = f"ipc://{self.dir}/admin" if admin else None
        cmd = [os.path.join(self.bindir, "minionsd"), "--port", "0",
               "--admin", self.admin_addr or "none"] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
        line = self.proc.stdout.readline()
        if "tcp " not in line:
            self.proc.wait()
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f"{' '.join(cmd)}: did not start (exit {self.proc.returncode})")
        self.addr = line.split("tcp ")[1].split()[0]
        self.http_port = int(line.split(" http 127.0.0.1:")[1].split()[0]) if " http 127.0.0.1:" in line else None

    def admin(self, cmd):
        """One admin command (a dict); its reply, or RuntimeError where the reply is not ok."""
        out = subprocess.run([os.path.join(self.bindir, "minions-cli"), "--admin", self.admin_addr, json.dumps(cmd)],
                             capture_output=True, text=True, check=True).stdout
        reply = json.loads(out)
        if not reply.get("ok"):
            raise RuntimeError(f"admin {cmd}: {reply}")
        return reply

    def set(self, key, value):
        self.admin({"cmd": "set", "key": key, "value": value})

    def stats(self):
        return self.admin({"cmd": "stats"})["stats"]

    def stop(self, timeout=None):
        """SIGTERM, then the exit status; after `timeout` seconds the daemon is killed and None
        returned."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)


def bench(addr, prompts, clients, requests, tokens, *extra):
    """minions-bench against addr (extra: more of its options): its summary, the last line's JSON."""
    out = subprocess.run([os.path.join(BIN, "minions-bench"), "--addr", addr, "--clients", str(clients),
                          "--prompts", prompts, "--requests", str(requests), "--max-tokens", str(tokens)]
                         + [str(e) for e in extra], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
