#!/usr/bin/env python3
"""corpora.py OUTDIR: extract the three public-domain corpora from Debian packages and split them.

  kjv    King James Bible       (bible-kjv + bible-kjv-text: `bible -m 8192 -l 100000 gen1:1-rev22:21`)
  web    World English Bible    (sword-text-web + diatheke, module engWEB2015eb)
  devil  The Devil's Dictionary (dict-devil: /usr/share/dictd/devil.dict.dz)

A unit is a chapter (bibles) or an entry (dictionary). Every 20th unit is held out: it never enters
training and is where evaluation text and prompt sets come from. Writes OUTDIR/{name}.train.txt,
OUTDIR/{name}.heldout.txt (units separated by blank lines) and OUTDIR/{name}.units.json (held-out
units, for prompt sets).
"""
import gzip
import json
import os
import re
import subprocess
import sys

HOLDOUT_EVERY = 20


def kjv_units():
    out = subprocess.run(["bible", "-m", "8192", "-l", "100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True, encoding="latin-1").stdout
    units, cur = [], []
    for line in out.splitlines():
        m = re.match(r"^\s+\d+\s+(.*)$", line)
        if m:
            cur.append(m.group(1).strip())
        elif line.strip():  # a "Book N" header starts a chapter
            if cur:
                units.append("\n".join(cur))
            cur = []
    if cur:
        units.append("\n".join(cur))
    return units


def web_units():
    # Plain output without Strong's numbers glues words where the tags were ("Godcreated"); asking
    # for the tags (-o n) and deleting them keeps the spaces, then punctuation is re-attached.
    out = subprocess.run(["diatheke", "-b", "engWEB2015eb", "-f", "plain", "-o", "n", "-k",
                          "Genesis 1:1-Revelation 22:21"], check=True, capture_output=True, text=True).stdout
    units, cur, chapter = [], [], None
    for line in out.splitlines():
        m = re.match(r"^(.+?) (\d+):(\d+): ?(.*)$", line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        text = re.sub(r"<[^>]*>", "", m.group(4))                  # Strong's tags and any markup
        text = re.sub(r"\s+", " ", text.replace("*", "")).strip()   # footnote markers, doubled spaces
        text = re.sub(r" ([,.;:!?’”)\]])", r"\1", text)           # "beginning ," -> "beginning,"
        text = re.sub(r"([“‘(\[]) ", r"\1", text)
        if key != chapter and cur:
            units.append("\n".join(cur))
            cur = []
        chapter = key
        if text:
            cur.append(text)
    if cur:
        units.append("\n".join(cur))
    return units


def b64(s):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for ch in s:
        n = n * 64 + alphabet.index(ch)
    return n


def devil_units():
    data = gzip.open("/usr/share/dictd/devil.dict.dz").read().decode("latin-1")
    units = []
    for line in open("/usr/share/dictd/devil.index", encoding="latin-1"):
        word, off, size = line.rstrip("\n").split("\t")[:3]
        if word.startswith("00database"):
            continue
        text = data[b64(off):b64(off) + b64(size)]
        text = "\n".join(l.strip() for l in text.strip().splitlines())
        text = re.sub(r"\n{3,}", "\n\n", text)
        if len(text) > 20:
            units.append(text)
    return units


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fn in (("kjv", kjv_units), ("web", web_units), ("devil", devil_units)):
        units = fn()
        train = [u for i, u in enumerate(units) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
        held = [u for i, u in enumerate(units) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
        with open(os.path.join(out, f"{name}.train.txt"), "w") as f:
            f.write("\n\n".join(train) + "\n")
        with open(os.path.join(out, f"{name}.heldout.txt"), "w") as f:
            f.write("\n\n".join(held) + "\n")
        with open(os.path.join(out, f"{name}.units.json"), "w") as f:
            json.dump(held, f)
        print(f"{name}: {len(units)} units, {sum(map(len, train))} train chars, {sum(map(len, held))} held-out chars")


if __name__ == "__main__":
    main()
