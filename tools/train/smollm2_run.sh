#!/bin/sh
# smollm2_run.sh: reproduce SmolLM2's draft family end to end (docs/models.md, "The SmolLM2 family").
#   SmolLM2 Q4_1 (tools/fetch-smollm2.sh) served by build/minionsd as the teacher
#   -> prompt sets prompts/smollm2-*.jsonl (smollm2_prompts.py, held-out text and topics)
#   -> its greedy continuations of training text and instructions (smollm2_data.py)
#   -> three drafts distilled from them into models/ (smollm2_drafts.py)
#   -> the agreement table (smollm2_agreement.py)
# env: REQUESTS (2413: the committed drafts' data, the first ~600 of each domain), MINUTES (10, the general draft), SPECIALIST_MINUTES (3.5).
# Takes about 45 minutes on 2 cores (the teacher's text about 25 of them). Needs a build (make) and
# Debian's python3-torch with libopenblas0-openmp.
set -eu
cd "$(dirname "$0")/../.."
sh scripts/install-deps.sh --train
tools/fetch-smollm2.sh
teacher=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
work=${WORK:-build/distill}
mkdir -p "$work"
[ -f "$work/corpora/kjv.train.txt" ] || .venv/bin/python tools/train/corpora.py "$work/corpora"
.venv/bin/python tools/train/smollm2_prompts.py --corpora "$work/corpora" --model "$teacher" --out prompts

build/minionsd --model "$teacher" --http 127.0.0.1:0 --port 0 --threads 2 --max-batch 32 --kv-blocks 640 \
  --admin "ipc://$work/teacher.admin" >"$work/teacher.out" 2>"$work/teacher.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
url=
for _ in $(seq 300); do
  url=$(sed -n 's/.* http \([0-9.]*:[0-9]*\).*/http:\/\/\1/p' "$work/teacher.out")
  [ -n "$url" ] && break
  sleep 0.2
done
[ -n "$url" ] || { echo "smollm2_run: the teacher did not start" >&2; cat "$work/teacher.err" >&2; exit 1; }
.venv/bin/python tools/train/smollm2_data.py --url "$url" --corpora "$work/corpora" --out "$work/teacher.jsonl" \
  --per-domain 1500 --requests "${REQUESTS:-2413}" --max-tokens 96 --clients 32
.venv/bin/python tools/train/smollm2_drafts.py --teacher "$teacher" --data "$work/teacher.jsonl" --out models \
  --minutes "${MINUTES:-10}" --specialist-minutes "${SPECIALIST_MINUTES:-3.5}"
.venv/bin/python tools/train/smollm2_agreement.py --url "$url" --model "$teacher" --drafts models \
  --out "$work/agreement.json"
