#!/bin/sh
# run.sh: reproduce the bundled model family from Debian packages, end to end (docs/models.md).
#   corpora (tools/train/corpora.py) -> tokenizer + four models (train.py) -> prompt sets
#   (prompts.py) -> evaluation (evaluate.py, written to models/eval.json)
# Takes about 40 minutes on 2 cores. Training needs Debian's python3-torch with
# libopenblas0-openmp (without it torch falls back to the reference BLAS, ~20x slower).
set -eu
cd "$(dirname "$0")/../.."
sh scripts/install-deps.sh --train
work=${WORK:-build/corpora}
.venv/bin/python tools/train/corpora.py "$work"
rm -f models/tokenizer.json models/manifest.json
.venv/bin/python tools/train/train.py --corpora "$work" --out models "$@"
.venv/bin/python tools/train/prompts.py --corpora "$work" --models models --out prompts
.venv/bin/python tools/train/evaluate.py --models models --corpora "$work" --prompts prompts --n-prompts 16 --out models/eval.json
