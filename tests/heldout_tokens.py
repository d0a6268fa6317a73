#!/usr/bin/env python3
"""heldout_tokens.py MODEL N: print N token ids of public-domain English text for a teacher-forced
check, encoded by the independent reference tokenizer. The text is the King James Bible's held-out
chapters (every 20th, as tools/train/corpora.py splits it) when the `bible` program of bible-kjv is
installed, else Debian's licence texts."""
import glob
import os
import shutil
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
sys.path.insert(0, os.path.join(here, "..", "tools", "train"))
from ref_tokenize import BPE  # noqa: E402


def text():
    if shutil.which("bible"):
        from corpora import HOLDOUT_EVERY, kjv_units
        units = kjv_units()
        return "\n\n".join(u for i, u in enumerate(units) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1)
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            parts.append(open(p, encoding="utf-8").read())
        except (OSError, UnicodeDecodeError):
            pass
    return "\n".join(parts)


model, n = sys.argv[1], int(sys.argv[2])
ids = BPE(model).encode(text())
if len(ids) < n:
    sys.exit(f"only {len(ids)} tokens of text")
print(" ".join(str(i) for i in ids[:n]))
