#!/bin/sh
# http-clients.sh - real HTTP clients against minionsd --http: curl (whole, streamed, the API key,
# errors), minions-bench --http (completions and chat completions over keep-alive connections) and
# the official openai package and prometheus_client's parser (tests/http_clients.py, in the
# project's .venv). Prints "http-clients: N passed, N failed"; exits non-zero on any failure.
set -u
bin=${MINIONS_BIN_DIR:-.}
src=${MINIONS_SRCDIR:-.}
py=$src/.venv/bin/python
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
trap 'exit 143' INT TERM # make check's timeout: the EXIT trap still ends the daemon
passed=0
failed=0
check() { # description, then a command whose success means pass
  desc=$1
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $desc"; fi
}

echo "k-$$-test" >"$tmp/key"
"$bin/minionsd" --model "$src/models/target.gguf" --port -1 --admin none --threads 2 --draft ngram \
  --http 127.0.0.1:0 --api-key-file "$tmp/key" >"$tmp/out" 2>"$tmp/log" &
pid=$!
# up to a minute: a sanitized daemon beside a parallel make check has taken more than 10 s
for _ in $(seq 600); do grep -q listening "$tmp/out" 2>/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
port=$(sed -n 's/.* http 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/out")
check "minionsd prints its HTTP port" test -n "$port"
url=http://127.0.0.1:$port
auth="Authorization: Bearer $(cat "$tmp/key")"

c() { curl -s --max-time 60 -H "$auth" "$@"; }
c -o "$tmp/whole" -w '%{http_code}' "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"x","prompt":"And God said","max_tokens":16,"temperature":0}' >"$tmp/code"
check "curl: a completion is 200" grep -qx 200 "$tmp/code"
check "curl: ... with text and usage" grep -q '"completion_tokens":16' "$tmp/whole"
c -N "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"stream":true}' >"$tmp/sse"
check "curl: a chat stream is server-sent events ending in [DONE]" sh -c "tail -n 2 '$tmp/sse' | grep -qx 'data: \[DONE\]'"
check "curl: ... whose first chunk opens the assistant's message" sh -c "head -n 1 '$tmp/sse' | grep -q '\"role\":\"assistant\"'"
curl -s -o /dev/null -w '%{http_code}' "$url/v1/models" >"$tmp/code"
check "curl: no key, 401" grep -qx 401 "$tmp/code"
curl -s -o /dev/null -w '%{http_code}' "$url/health" >"$tmp/code"
check "curl: /health needs no key" grep -qx 200 "$tmp/code"
c -o "$tmp/err" -w '%{http_code}' "$url/v1/completions" -d '{"prompt":"x","max_tokens":-1}' >"$tmp/code"
check "curl: a bad field is 400" grep -qx 400 "$tmp/code"
check "curl: ... in OpenAI's error shape" grep -q '"param":"max_tokens"' "$tmp/err"

if "$py" "$src/tests/http_clients.py" "$url" "$(cat "$tmp/key")" >"$tmp/py" 2>&1; then :; fi
cat "$tmp/py"
p=$(sed -n 's/^python: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$tmp/py")
f=$(sed -n 's/^python: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$tmp/py")
passed=$((passed + ${p:-0}))
failed=$((failed + ${f:-1}))

# after the Python checks, which count the HTTP requests served so far
bench() { "$bin/minions-bench" --http --addr "127.0.0.1:$port" --max-tokens 8 --clients 3 "$@"; }
OPENAI_API_KEY=$(cat "$tmp/key") bench --prompts "$src/prompts/kjv.jsonl" --requests 7 --out "$tmp/recs" \
  --extra '{"cache_prompt":false}' >"$tmp/bench" 2>"$tmp/bench-err"
check "minions-bench --http: 7 completions from 3 clients" grep -q '"ok":7,"tokens":56,' "$tmp/bench"
check "... each with its usage and finish reason" \
  test "$(grep -c '"completion_tokens":8,.*"finish_reason":"length"' "$tmp/recs")" -eq 7
OPENAI_API_KEY=$(cat "$tmp/key") bench --prompts "$src/prompts/smollm2-chat.jsonl" --requests 4 >"$tmp/bench" 2>&1
check "minions-bench --http: chat prompts as chat completions" grep -q '"ok":4,"tokens":32,' "$tmp/bench"
OPENAI_API_KEY= bench --prompts "$src/prompts/kjv.jsonl" --requests 2 >"$tmp/bench" 2>"$tmp/bench-err"
check "minions-bench --http: without the key, it fails (exit 1)" test $? -eq 1
check "... saying the server's 401" grep -q 'HTTP 401' "$tmp/bench-err"

kill -TERM $pid
wait $pid
check "minionsd exits 0 after SIGTERM" test $? -eq 0
pid=
echo "http-clients: $passed passed, $failed failed"
test "$failed" -eq 0
