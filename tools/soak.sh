#!/bin/sh
# soak.sh: a soak of minionsd whose end state is checked (issue #9). Starts minionsd on an ephemeral
# TCP port, a Unix socket and an ipc:// admin socket in a temporary directory, with a small KV pool
# (preemption), a small batch and a small output buffer (throttling); runs minions-soak against it
# (random cancels, disconnects, half-closes, bad lines, slow readers; every request answered exactly
# once, KV back to 0, no connection left); then SIGTERM, and minionsd must exit 0.
#   tools/soak.sh        env: REQUESTS (10000) CLIENTS (16) SEED (1) MAX_TOKENS (24) KV_BLOCKS (24)
#                             MAX_BATCH (8) THREADS (2) BIN (build, or $MINIONS_BIN_DIR: where minionsd
#                             and minions-soak are) MODEL (models/target.gguf) PROMPTS (prompts/kjv.jsonl)
#                             DRAFTS (none: plain decoding; else minionsd's --draft values, separated
#                             by spaces, e.g. "models/draft-kjv.gguf ngram": the soak then speculates,
#                             and greedy and seeded repeats must still give one text, as plain decoding's)
#                             KV_TYPE (f32; f16: minionsd --kv-type f16)
#                             SERVER_ARGS (more minionsd options, e.g. "--pipeline")
# The last line is `soak: N passed, M failed` (minions-soak's checks and minionsd's exit status);
# exit 0 when nothing failed. Everything the run wrote is kept in the directory printed on failure.
# Relative paths (BIN, MODEL, PROMPTS) are taken from the source root, where the script runs.
set -eu
cd "$(dirname "$0")/.."
bin=${BIN:-${MINIONS_BIN_DIR:-build}}
requests=${REQUESTS:-10000}
clients=${CLIENTS:-16}
seed=${SEED:-1}
max_tokens=${MAX_TOKENS:-24}
kv_blocks=${KV_BLOCKS:-24}
max_batch=${MAX_BATCH:-8}
threads=${THREADS:-2}
model=${MODEL:-models/target.gguf}
prompts=${PROMPTS:-prompts/kjv.jsonl}
drafts=
for d in ${DRAFTS:-}; do drafts="$drafts --draft $d"; done
kv_type=${KV_TYPE:-f32}
max_line=8192

for b in minionsd minions-soak; do
  [ -x "$bin/$b" ] || { echo "soak.sh: $bin/$b not found (build it, or set BIN)" >&2; exit 2; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/minions-soak-XXXXXX")
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The output files exist before the daemon starts: its redirections happen in the background
# child, and under load the loop below could read a file not yet created; sed's failure then ended
# this script under set -e with status 2 and no message (ASan soak failures seen in CI and here).
: >"$tmp/minionsd.out"
: >"$tmp/minionsd.err"
"$bin/minionsd" --model "$model" --port 0 --unix "$tmp/sock" --admin "ipc://$tmp/admin" --threads "$threads" \
  --max-batch "$max_batch" --kv-blocks "$kv_blocks" --kv-type "$kv_type" --output-buffer 4 --max-line "$max_line" \
  --drain-timeout 30 $drafts ${SERVER_ARGS:-} >"$tmp/minionsd.out" 2>"$tmp/minionsd.err" &
pid=$!
addr=
for _ in $(seq 600); do
  addr=$(sed -n '1s/^minionsd: listening tcp \([0-9.]*:[0-9]*\) .*/\1/p' "$tmp/minionsd.out" 2>/dev/null)
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "soak.sh: minionsd did not start (see $tmp); its stderr:" >&2
  cat "$tmp/minionsd.err" >&2
  exit 1
fi
echo "soak.sh: minionsd pid $pid on $addr, $tmp/sock; kv-blocks $kv_blocks ($kv_type), max-batch $max_batch;" \
  "$requests requests, $clients clients, seed $seed; drafts: ${DRAFTS:-none}" >&2

set +e
"$bin/minions-soak" --addr "$addr" --unix "$tmp/sock" --admin "ipc://$tmp/admin" --requests "$requests" \
  --clients "$clients" --seed "$seed" --max-tokens "$max_tokens" --prompts "$prompts" \
  --max-line "$max_line" >"$tmp/soak.out" 2>"$tmp/soak.err"
soak_rc=$?
set -e
cat "$tmp/soak.err" >&2
sed '$d' "$tmp/soak.out"

# SIGTERM drains: minionsd must exit 0 (a watchdog kills it after the drain timeout and a margin).
kill -TERM "$pid" 2>/dev/null || true # already gone: wait says how it ended
( sleep 45; kill -KILL "$pid" 2>/dev/null ) >/dev/null 2>&1 &
watchdog=$!
set +e
wait "$pid"
daemon_rc=$?
set -e
kill "$watchdog" 2>/dev/null || true
pid=
if [ -s "$tmp/minionsd.err" ]; then
  echo "soak.sh: minionsd stderr (last 20 lines):" >&2
  tail -n 20 "$tmp/minionsd.err" >&2
fi

last=$(tail -n 1 "$tmp/soak.out")
passed=$(printf '%s\n' "$last" | sed -n 's/^soak: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
failed=$(printf '%s\n' "$last" | sed -n 's/^soak: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
if [ -z "$passed" ]; then
  echo "soak.sh: minions-soak exited $soak_rc without its summary" >&2
  passed=0
  failed=1
fi
if [ "$daemon_rc" = 0 ]; then
  echo "soak: ok   minionsd exits 0 after SIGTERM" >&2
  passed=$((passed + 1))
else
  echo "soak: FAIL minionsd exited $daemon_rc after SIGTERM" >&2
  failed=$((failed + 1))
fi
if [ "$failed" = 0 ] && [ "$soak_rc" = 0 ]; then
  rm -rf "$tmp"
else
  echo "soak.sh: kept $tmp" >&2
  [ "$failed" != 0 ] || failed=1 # minions-soak failed without saying which check
fi
echo "soak: $passed passed, $failed failed"
[ "$failed" = 0 ]
