#!/usr/bin/env python3
"""heldout_tokens.py MODEL N: print N token ids of public-domain English text for a teacher-forced
check, encoded by the independent reference tokenizer. The text is the King James Bible when the
bible-kjv-text package is installed, else Debian's licence texts."""
import glob
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
from ref_tokenize import BPE  # noqa: E402


def text():
    for p in ["/usr/share/bible-kjv/bible.rawtext", "/usr/share/bible-kjv/bible.data"]:
        if os.path.exists(p):
            return open(p, encoding="latin-1").read()[:200000]
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
