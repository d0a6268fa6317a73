#!/bin/sh
# bench-serve.sh: minionsd's two serving figures, measured side by side in one run.
#   1. scaling: total throughput with 16 concurrent clients / with 1 client (minions-bench);
#   2. overhead: the decode rate of one client's requests through the server (tokens after the
#      first over the time after it) against minions-generate's on the same prompts. Decoding only:
#      minions-generate is a fresh process a prompt, whose first pass runs on cold caches (2-12 ms
#      for a few prompt tokens, against 0.3 ms warm), which a running server pays once.
# Rounds alternate the measurements; medians are printed.
#   tools/bench-serve.sh [MODEL] [PROMPTS.jsonl]      env: THREADS (2) TOKENS (64) REQUESTS (32) ROUNDS (3)
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/target.gguf}
prompts=${2:-prompts/kjv.jsonl}
threads=${THREADS:-2}
tokens=${TOKENS:-64}
requests=${REQUESTS:-32}
rounds=${ROUNDS:-3}
out=build/bench-serve
mkdir -p "$out"

build/minionsd --model "$model" --port 0 --admin none --threads "$threads" --max-batch 16 >"$out/minionsd.out" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$out/minionsd.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*tcp \([0-9.]*:[0-9]*\).*/\1/p' "$out/minionsd.out")

# decode tok/s of minions-generate over the first $requests prompts: tokens after the first / their seconds
generate_rate() {
  head -n "$requests" "$prompts" | while IFS= read -r line; do
    p=$(printf '%s' "$line" | .venv/bin/python -c 'import json,sys; print(json.loads(sys.stdin.read())["prompt"], end="")')
    build/minions-generate --model "$model" --prompt "$p" -n "$tokens" -t "$threads" 2>&1 >/dev/null |
      sed -n 's/.*generated \([0-9]*\) tokens, \([0-9.]*\) tok\/s.*/\1 \2/p'
  done | awk '$2 > 0 { t += ($1 - 1) / $2; n += $1 - 1 } END { printf "%.1f\n", n / t }'
}
# tok/s of `clients` clients (minions-bench's summary); with one client, its decode rate (tokens after
# the first over the latency after the first token) too, into $out/one-decode
server_rate() { # clients requests
  build/minions-bench --addr "$addr" --clients "$1" --prompts "$prompts" --requests "$2" --max-tokens "$tokens" \
    --out "$out/records-$1.jsonl" | tail -n 1 >"$out/summary-$1.json"
  if [ "$1" = 1 ]; then
    awk -F'[:,]' '{ for (i = 1; i < NF; i++) { if ($i ~ /completion_tokens/) c = $(i+1); if ($i ~ /"ttft_s"/) f = $(i+1);
                                                 if ($i ~ /latency_s/) l = $(i+1) }
                   n += c - 1; t += l - f } END { printf "%.1f\n", n / t }' "$out/records-1.jsonl" >>"$out/one-decode"
  fi
  sed -n 's/.*"tok_per_s":\([0-9.]*\).*/\1/p' "$out/summary-$1.json"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

: >"$out/gen"; : >"$out/one"; : >"$out/one-decode"; : >"$out/sixteen"
for r in $(seq "$rounds"); do
  generate_rate >>"$out/gen"
  server_rate 1 "$requests" >>"$out/one"
  server_rate 16 $((requests * 4)) >>"$out/sixteen"
  echo "round $r: generate decode $(tail -n 1 "$out/gen") | server 1 client decode $(tail -n 1 "$out/one-decode")," \
    "all $(tail -n 1 "$out/one") | 16 clients $(tail -n 1 "$out/sixteen") tok/s"
done
g=$(median <"$out/gen"); d=$(median <"$out/one-decode"); o=$(median <"$out/one"); s=$(median <"$out/sixteen")
echo "model $model, $threads threads, $tokens tokens per request, median of $rounds rounds"
echo "  decoding, minions-generate:             $g tok/s"
echo "  decoding, minionsd with 1 client:       $d tok/s  (overhead $(awk -v g="$g" -v d="$d" 'BEGIN { printf "%.1f%%", 100 * (1 - d / g) }'))"
echo "  minionsd, 1 client, prefill included:  $o tok/s"
echo "  minionsd, 16 clients:                  $s tok/s  ($(awk -v o="$o" -v s="$s" 'BEGIN { printf "%.2fx", s / o }') the 1-client rate)"
