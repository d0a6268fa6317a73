#!/usr/bin/env python3
"""gguf-set-pre: rewrite GGUF files so that tokenizer.ggml.pre names another pre-tokenizer.

    python3 tools/gguf-set-pre.py gpt-2 models/target.gguf models/draft-*.gguf

Why: the bundled models were written with pre = "default", which llama.cpp reads as its own
default split (punctuation runs and digit triples apart), not GPT-2's pattern that minions uses;
"gpt-2" is llama.cpp's name for that pattern (issue #9, defect 10).

Tensor offsets in GGUF count from the start of the data section, so only the string and the
padding up to the next multiple of the file's alignment change: the rest of the header and the
whole data section are copied byte for byte. The new file is read back and checked (every other
key and every tensor unchanged) before it replaces the old one; its sha256 is printed.
Needs the PyPI `gguf` package (the project's .venv).
"""
import hashlib
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader

KEY = "tokenizer.ggml.pre"


def field_end(f):
    return f.offset + sum(p.nbytes for p in f.parts)


def rewritten(path, pre):
    """The bytes of the file at path with KEY set to pre."""
    r = GGUFReader(path)
    f = r.fields.get(KEY)
    if f is None:
        sys.exit(f"{path}: has no {KEY}")
    raw = open(path, "rb").read()
    value_at = f.offset + sum(p.nbytes for p in f.parts[:3])  # after key length, key and value type
    header_end = max(field_end(x) for x in list(r.fields.values()) + [t.field for t in r.tensors])
    value = pre.encode("utf-8")
    head = raw[:value_at] + struct.pack("<Q", len(value)) + value + raw[field_end(f):header_end]
    head += b"\0" * (-len(head) % r.alignment)
    return head + raw[r.data_offset:]


def check(old_path, new_path, pre):
    a, b = GGUFReader(old_path), GGUFReader(new_path)
    assert b.fields[KEY].contents() == pre
    assert b.data_offset % b.alignment == 0
    keys = [k for k in a.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in b.fields if not k.startswith("GGUF.")]
    for k in keys:
        if k != KEY:
            assert a.fields[k].contents() == b.fields[k].contents(), k
    assert len(a.tensors) == len(b.tensors)
    for x, y in zip(a.tensors, b.tensors):
        assert (x.name, x.tensor_type, list(x.shape)) == (y.name, y.tensor_type, list(y.shape)), x.name
        assert np.asarray(x.data).tobytes() == np.asarray(y.data).tobytes(), x.name


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pre = sys.argv[1]
    for path in sys.argv[2:]:
        tmp = path + ".tmp"
        with open(tmp, "wb") as out:
            out.write(rewritten(path, pre))
        check(path, tmp, pre)
        os.replace(tmp, path)
        print(hashlib.sha256(open(path, "rb").read()).hexdigest(), path)


if __name__ == "__main__":
    main()
