#!/bin/sh
# llama-tokenize-fixtures.sh LLAMA_TOKENIZE [MODEL] > tests/fixtures/llama-tokenize-ids.jsonl
#
# llama.cpp's token ids for every prompt of prompts/{kjv,web,devil}.jsonl with MODEL (default
# models/target.gguf), one line {"set": S, "index": I, "ids": [...]} per prompt, in file order.
# tests/test_family.c checks that minions encodes each prompt to the same ids, so that our GGUF
# files tokenize alike in both engines (issue #9, defect 10).
#
# LLAMA_TOKENIZE is llama.cpp's llama-tokenize binary (CPU build; llama.cpp is not part of this
# repository; the committed fixture came from llama.cpp c392e5094dea of 2025-02-20, built with
#   cmake -B build -DGGML_CUDA=OFF -DLLAMA_CURL=OFF && cmake --build build --target llama-tokenize -j2).
# The flags make it tokenize the prompt's bytes exactly as minions does:
#   -f FILE               the prompt's exact bytes (no shell quoting, no trailing newline)
#   --no-escape           do not turn "\n" and friends in the text into control characters
#   --no-parse-special    text spelling a special token is plain text (minions never parses them)
#   --no-bos              no BOS: the family's GGUF says add_bos_token = false, so mn_tok_encode
#                         adds none even when asked to
#   --ids --log-disable   print only the id list, as a JSON array
# Needs python3 (for reading JSON lines only).
set -eu
bin=$1
src=$(cd "$(dirname "$0")/.." && pwd)
model=${2:-$src/models/target.gguf}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for set in kjv web devil; do
  # one file per prompt, holding its UTF-8 bytes
  "$py" -c '
import json, sys
for i, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    open("%s/%d" % (sys.argv[2], i), "wb").write(json.loads(line)["prompt"].encode("utf-8"))
' "$src/prompts/$set.jsonl" "$tmp"
  i=0
  while [ -f "$tmp/$i" ]; do
    ids=$("$bin" -m "$model" -f "$tmp/$i" --no-escape --no-parse-special --no-bos --ids --log-disable)
    printf '{"set": "%s", "index": %d, "ids": %s}\n' "$set" "$i" "$ids"
    rm "$tmp/$i"
    i=$((i + 1))
  done
done
