#!/usr/bin/env python3
"""ref_tokenize: an independent byte-level BPE encoder, the oracle of the engine's tokenizer.

It reads the vocabulary with the PyPI `gguf` package, pre-tokenizes with the `regex` module using
the pattern tokenizer.ggml.pre names, and applies merges with the classic GPT-2 loop (find the
lowest-ranked adjacent pair, merge every occurrence, repeat), a different algorithm from the engine's
heap.

    ref_tokenize.py MODEL.gguf TEXTS.jsonl OUT.jsonl

Each input line is a JSON string; each output line is the JSON list of its token ids.
"""
import json
import sys

import regex
from gguf import GGUFReader

# GPT-2's byte map and pattern are the format's definition, shared with the writer; the merge
# algorithm below is what is independent of the engine.
from ggufw import GPT2_PATTERN as GPT2
from ggufw import bytes_to_unicode, merge_pair


def strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


class BPE:
    def __init__(self, path):
        r = GGUFReader(path)
        self.tokens = strings(r, "tokenizer.ggml.tokens")
        tt = r.fields.get("tokenizer.ggml.token_type")
        types = [int(tt.parts[i][0]) for i in tt.data] if tt else [1] * len(self.tokens)
        self.ids = {}
        for i, t in enumerate(self.tokens):
            if types[i] in (1, 6) and t not in self.ids:
                self.ids[t] = i
        self.ranks = {}
        for i, m in enumerate(strings(r, "tokenizer.ggml.merges")):
            a, b = m.split(" ", 1)
            self.ranks.setdefault((a, b), i)
        pre = r.fields.get("tokenizer.ggml.pre")
        self.pre = pre.contents() if pre else "gpt-2"
        self.b2u = bytes_to_unicode()

    def pieces(self, text):
        if self.pre == "smollm":
            for part in regex.split(r"(\p{N})", text):
                if part:
                    yield from ([part] if regex.fullmatch(r"\p{N}", part) else regex.findall(GPT2, part))
        else:
            yield from regex.findall(GPT2, text)

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best = min(((self.ranks.get(p, 1 << 60), i) for i, p in enumerate(zip(parts, parts[1:]))))
            if best[0] == 1 << 60:
                break
            parts = merge_pair(parts, parts[best[1]], parts[best[1] + 1])
        return [self.ids[p] for p in parts if p in self.ids]

    def encode(self, text):
        out = []
        cache = self.__dict__.setdefault("_cache", {})  # pieces repeat; the result is the same
        for piece in self.pieces(text):
            ids = cache.get(piece)
            if ids is None:
                ids = cache[piece] = self.bpe("".join(self.b2u[b] for b in piece.encode("utf-8")))
            out += ids
        return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bpe = BPE(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as fin, open(sys.argv[3], "w") as fout:
        for line in fin:
            fout.write(json.dumps(bpe.encode(json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
