#!/bin/sh
# nginx.sh - two minionsd behind nginx with deploy/nginx.conf's directives: concurrent requests
# spread over both; a SIGTERM mid-run drains one (every request in flight is answered in full, new
# ones go to the other); a SIGKILL mid-run leaves every request with a full answer or an error
# status, none hanging. Prints "nginx: N passed, N failed"; skips (0 and 0) without nginx.
set -u
bin=${MINIONS_BIN_DIR:-.}
src=${MINIONS_SRCDIR:-.}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [ ! -x "$NGINX" ]; then
  echo "SKIP: no nginx (Debian's nginx-light; scripts/install-deps.sh installs it)"
  echo "nginx: 0 passed, 0 failed"
  exit 0
fi
tmp=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  [ -f "$tmp/nginx.pid" ] && kill -9 "$(cat "$tmp/nginx.pid")" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
check() { # description, then a command whose success means pass
  desc=$1
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $desc"; fi
}

start() { # name port: a minionsd on 127.0.0.1:port (0: ephemeral); sets pid_<name>, port_<name>
  "$bin/minionsd" --model "$src/models/target.gguf" --port -1 --admin none --threads 1 --max-batch 8 \
    --http "127.0.0.1:$2" >"$tmp/$1.out" 2>"$tmp/$1.log" &
  eval "pid_$1=$!"
  pids="$pids $!"
  for _ in $(seq 100); do grep -q listening "$tmp/$1.out" 2>/dev/null && break; sleep 0.1; done
  eval "port_$1=$(sed -n 's/.* http 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$1.out")"
}
start a 0
start b 0
check "both instances listen" test -n "$port_a" -a -n "$port_b"

# deploy/nginx.conf's upstream and locations in a private nginx, with these ports and a 2 s
# fail_timeout (a failed instance is back in rotation after 2 s instead of 10: a shorter test)
for try in 1 2 3 4 5; do
  port=$(( (($$ + try * 7919) % 20000) + 30000 ))
  { echo "pid $tmp/nginx.pid; error_log $tmp/error.log; worker_processes 1; events {}"
    echo "http { access_log $tmp/access.log; client_body_temp_path $tmp; proxy_temp_path $tmp;"
    sed -e "s/127.0.0.1:8081/127.0.0.1:$port_a/" -e "s/127.0.0.1:8082/127.0.0.1:$port_b/" \
        -e "s/listen 8080;/listen 127.0.0.1:$port;/" -e 's/fail_timeout=10s/fail_timeout=2s/' -e 's/#.*//' \
        "$src/deploy/nginx.conf"
    echo "}"; } >"$tmp/nginx.conf"
  "$NGINX" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" 2>"$tmp/nginx.err" && break
done
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.1; done
check "nginx starts with the deployed directives" curl -sf -o /dev/null "http://127.0.0.1:$port/health"
url=http://127.0.0.1:$port/v1/completions

ask() { # out-file max_tokens stream: one request through nginx; writes the status code, then the body
  curl -s -N --max-time 60 -o "$1.body" -w '%{http_code}' "$url" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"In the beginning\",\"max_tokens\":$2,\"temperature\":0,\"stream\":$3}" >"$1.code" 2>/dev/null
  echo $? >"$1.rc"
}
complete() { # out-file stream: a 200 with a whole answer
  grep -qx 200 "$1.code" || return 1
  if [ "$2" = true ]; then tail -n 2 "$1.body" | grep -qx 'data: \[DONE\]'; else grep -q '"finish_reason":"length"' "$1.body"; fi
}
served() { # port: HTTP requests this instance answered
  curl -s "http://127.0.0.1:$1/metrics" |
    sed -n 's/^minions_requests_total{frontend="http",outcome="length"} //p'
}
asks=""
batch() { # tag n max_tokens: n concurrent requests, every other one streamed, in the background
  i=0
  while [ $i -lt "$2" ]; do
    s=false; [ $((i % 2)) = 1 ] && s=true
    ask "$tmp/$1$i" "$3" $s &
    asks="$asks $!"
    i=$((i + 1))
  done
}
await() { # every request batch started
  wait $asks
  asks=""
}
all_complete() { # tag n
  i=0
  while [ $i -lt "$2" ]; do
    s=false; [ $((i % 2)) = 1 ] && s=true
    complete "$tmp/$1$i" $s || { echo "  $1$i: $(cat "$tmp/$1$i.code") rc $(cat "$tmp/$1$i.rc")"; return 1; }
    i=$((i + 1))
  done
}

# a. spread
batch spread 16 32
await
check "16 concurrent requests through nginx all answered in full" all_complete spread 16
a=$(served "$port_a")
b=$(served "$port_b")
check "both instances served some ($a and $b)" test "${a:-0}" -gt 0 -a "${b:-0}" -gt 0

# b. SIGTERM drains one mid-run
batch drain 8 200
sleep 1
kill -TERM "$pid_a"
sleep 0.3
batch after 8 24
await
check "the requests in flight when A got SIGTERM were answered in full" all_complete drain 8
check "new requests during and after A's drain all succeeded" all_complete after 8
wait "$pid_a"
check "A exited 0 after its drain" test $? -eq 0

# c. SIGKILL one mid-run: full answers or error statuses, none hanging
start a "$port_a"
check "A restarts on its port" test -n "$port_a"
sleep 2.5 # past the fail_timeout that A's drain started: nginx tries A again
for _ in $(seq 20); do # until nginx has put A back in rotation (a request served)
  [ "$(served "$port_a")" -gt 0 ] 2>/dev/null && break
  ask "$tmp/probe" 4 false
done
check "nginx sends requests to the restarted A" test "$(served "$port_a")" -gt 0
batch kill 8 1000
sleep 0.5
kill -9 "$pid_b"
await
hung=0
bad=0
full=0
i=0
while [ $i -lt 8 ]; do
  f=$tmp/kill$i
  [ "$(cat "$f.rc")" = 28 ] && hung=$((hung + 1))
  s=false; [ $((i % 2)) = 1 ] && s=true
  if complete "$f" $s; then
    full=$((full + 1))
  else # then it must say so: an error status, or a stream cut short
    echo "  kill$i: $(cat "$f.code") rc $(cat "$f.rc") $(tail -c 120 "$f.body" | tr "\n" " ")"
    case "$(cat "$f.code")" in 5*|000) ;; 200) [ "$(cat "$f.rc")" != 0 ] || grep -q '"error"' "$f.body" ||
      ! tail -n 2 "$f.body" | grep -qx 'data: \[DONE\]' || bad=$((bad + 1)) ;; *) bad=$((bad + 1)) ;; esac
  fi
  i=$((i + 1))
done
echo "after the SIGKILL: $full of 8 answered in full, the rest an error"
check "after a SIGKILL no request hung" test $hung -eq 0
check "... and each got a full answer or an error" test $bad -eq 0
batch survivor 4 16
await
check "new requests succeed through the survivor" all_complete survivor 4
kill -TERM "$pid_a"
wait "$pid_a"
check "A exits 0" test $? -eq 0
echo "nginx: $passed passed, $failed failed"
test "$failed" -eq 0
