#!/usr/bin/env python3
"""ggufw: write small llama models as GGUF v3 files, for tests and benchmarks.

The files follow the GGUF llama conventions exactly (keys, tensor names, ne order, block layouts,
alignment), so any GGUF reader loads them; the tests check that the PyPI `gguf` reader does.

    python3 tools/ggufw.py --out m.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 100 \
        --vocab 512 --type f32 [--untied] [--pre gpt-2|smollm|default] [--seed 1] [--text FILE ...]

The vocabulary is a byte-level BPE trained on --text (default: the licence texts every Debian
system ships under /usr/share/common-licenses) up to --vocab tokens; weights are random.
GPT-2's pattern is written as pre = "gpt-2", llama.cpp's name for it: llama.cpp reads "default"
(what files written before issue #9 say; --pre default still writes it, for tests) as another split.
Needs only numpy (Debian's python3-numpy) and `regex` (python3-regex).
"""
import argparse
import collections
import struct
import sys

import numpy as np
import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0 = 0, 1, 2, 3, 8
TYPE_NAMES = {"f32": T_F32, "f16": T_F16, "q4_0": T_Q4_0, "q4_1": T_Q4_1, "q8_0": T_Q8_0}


def bytes_to_unicode():
    """GPT-2's map from bytes to printable code points."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


# ---- quantizers (ggml's reference rounding) ----------------------------------------------------

def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def quantize(w, ttype):
    """Bytes of a [rows, cols] float32 matrix in ggml type ttype."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if ttype == T_F32:
        return w.tobytes()
    if ttype == T_F16:
        return w.astype(np.float16).tobytes()
    rows, cols = w.shape
    assert cols % 32 == 0, "quantized rows must be a multiple of 32"
    b = w.reshape(rows, cols // 32, 32)
    if ttype == T_Q8_0:
        amax = np.abs(b).max(axis=2)
        d = amax / 127.0
        idv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
        q = np.round(b * idv[..., None]).astype(np.int8)
        rec = np.zeros((rows, cols // 32), dtype=[("d", "<f2"), ("q", "i1", 32)])
        rec["d"], rec["q"] = _f16(d), q
        return rec.tobytes()
    if ttype == T_Q4_0:
        idx = np.abs(b).argmax(axis=2)
        mx = np.take_along_axis(b, idx[..., None], axis=2)[..., 0]
        d = mx / -8.0
        idv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0)
        q = np.minimum(15, np.trunc(b * idv[..., None] + 8.5)).astype(np.uint8)
        packed = q[..., :16] | (q[..., 16:] << 4)
        rec = np.zeros((rows, cols // 32), dtype=[("d", "<f2"), ("q", "u1", 16)])
        rec["d"], rec["q"] = _f16(d), packed
        return rec.tobytes()
    if ttype == T_Q4_1:
        mn, mx = b.min(axis=2), b.max(axis=2)
        d = (mx - mn) / 15.0
        idv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0)
        q = np.minimum(15, np.trunc((b - mn[..., None]) * idv[..., None] + 0.5)).astype(np.uint8)
        packed = q[..., :16] | (q[..., 16:] << 4)
        rec = np.zeros((rows, cols // 32), dtype=[("d", "<f2"), ("m", "<f2"), ("q", "u1", 16)])
        rec["d"], rec["m"], rec["q"] = _f16(d), _f16(mn), packed
        return rec.tobytes()
    raise ValueError(f"unsupported type {ttype}")


# ---- GGUF writer --------------------------------------------------------------------------------

class Writer:
    def __init__(self, alignment=32):
        self.kv = []        # (key, vtype, value, elem_type)
        self.tensors = []   # (name, shape ne (list), ttype, bytes)
        self.alignment = alignment

    def add(self, key, vtype, value, elem=None):
        self.kv.append((key, vtype, value, elem))

    def add_tensor(self, name, array, ttype):
        array = np.asarray(array, dtype=np.float32)
        ne = list(reversed(array.shape))  # GGUF lists the contiguous dimension first
        data = quantize(array.reshape(-1, array.shape[-1]) if array.ndim > 1 else array[None, :], ttype)
        self.tensors.append((name, ne, ttype, data))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        return struct.pack("<Q", len(b)) + b

    def _scalar(self, vtype, v):
        fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
               U64: "<Q", I64: "<q", F64: "<d"}
        if vtype == STRING:
            return self._str(v)
        return struct.pack(fmt[vtype], v)

    def header(self):
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for key, vtype, value, elem in self.kv:
            out += self._str(key) + struct.pack("<I", vtype)
            if vtype == ARRAY:
                out += struct.pack("<IQ", elem, len(value))
                if elem in (I32, U32, F32) and not isinstance(value, list):
                    out += np.asarray(value, dtype={I32: "<i4", U32: "<u4", F32: "<f4"}[elem]).tobytes()
                else:
                    for v in value:
                        out += self._scalar(elem, v)
            else:
                out += self._scalar(vtype, value)
        offset = 0
        self.offsets = []
        for name, ne, ttype, data in self.tensors:
            out += self._str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
            out += struct.pack("<IQ", ttype, offset)
            self.offsets.append(offset)
            offset += (len(data) + self.alignment - 1) // self.alignment * self.alignment
        return bytes(out)

    def write(self, path):
        head = self.header()
        with open(path, "wb") as f:
            f.write(head)
            f.write(b"\0" * ((-len(head)) % self.alignment))
            for (name, ne, ttype, data) in self.tensors:
                f.write(data)
                f.write(b"\0" * ((-len(data)) % self.alignment))


# ---- byte-level BPE training --------------------------------------------------------------------

def pretokenize(text, pre):
    if pre == "smollm":
        out = []
        for piece in regex.split(r"(\p{N})", text):
            if piece:
                out.extend([piece] if regex.fullmatch(r"\p{N}", piece) else regex.findall(GPT2_PATTERN, piece))
        return out
    return regex.findall(GPT2_PATTERN, text)


def merge_pair(parts, a, b):
    """parts with every non-overlapping occurrence of the adjacent pair (a, b) merged, left to right."""
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return out


def train_bpe(text, n_merges, pre="gpt-2"):
    """Merges (pairs of byte strings) learned by counting adjacent pairs within pre-tokens."""
    words = collections.Counter(tuple(bytes([c]) for c in w.encode("utf-8")) for w in pretokenize(text, pre))
    words = [[list(w), n] for w, n in words.items()]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, (w, n) in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += n
            where[(a, b)].add(i)
    merges = []
    while len(merges) < n_merges and pairs:
        (a, b), cnt = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        merges.append((a, b))
        for i in list(where[(a, b)]):
            w, n = words[i]
            for x, y in zip(w, w[1:]):
                pairs[(x, y)] -= n
                if pairs[(x, y)] <= 0:
                    del pairs[(x, y)]
            nw = words[i][0] = merge_pair(w, a, b)
            for x, y in zip(nw, nw[1:]):
                pairs[(x, y)] += n
                where[(x, y)].add(i)
    return merges


def build_vocab(text, vocab_size, pre):
    """tokens (byte-level strings), types, merges (strings) for a vocabulary of vocab_size."""
    b2u = bytes_to_unicode()
    enc = lambda bs: "".join(b2u[c] for c in bs)
    tokens, types = ["<|endoftext|>"], [3]
    tokens += [b2u[b] for b in range(256)]
    types += [1] * 256
    merges = train_bpe(text, max(0, vocab_size - len(tokens)), pre)
    seen = set(tokens)
    merge_strs = []
    for a, b in merges:
        t = enc(a + b)
        merge_strs.append(enc(a) + " " + enc(b))
        if t not in seen:
            seen.add(t)
            tokens.append(t)
            types.append(1)
    while len(tokens) < vocab_size:  # pad with unused slots when the text runs out of merges
        tokens.append(f"<unused_{len(tokens)}>")
        types.append(5)
    return tokens[:vocab_size], types[:vocab_size], merge_strs


def default_text():
    import glob
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            with open(p, encoding="utf-8") as f:
                parts.append(f.read())
        except (OSError, UnicodeDecodeError):
            pass
    return "\n".join(parts)


def llama_writer(name, dim, layers, heads, kv_heads, ff, ctx, vocab, tokens, types, merges, pre="gpt-2",
                 rope_base=10000.0, eps=1e-5):
    """A Writer holding the llama and tokenizer metadata; the caller adds the tensors."""
    w = Writer()
    w.add("general.architecture", STRING, "llama")
    w.add("general.name", STRING, name)
    w.add("general.alignment", U32, 32)
    w.add("llama.context_length", U32, ctx)
    w.add("llama.embedding_length", U32, dim)
    w.add("llama.block_count", U32, layers)
    w.add("llama.feed_forward_length", U32, ff)
    w.add("llama.attention.head_count", U32, heads)
    w.add("llama.attention.head_count_kv", U32, kv_heads)
    w.add("llama.attention.layer_norm_rms_epsilon", F32, eps)
    w.add("llama.rope.freq_base", F32, rope_base)
    w.add("llama.rope.dimension_count", U32, dim // heads)
    w.add("llama.vocab_size", U32, vocab)
    w.add("tokenizer.ggml.model", STRING, "gpt2")
    w.add("tokenizer.ggml.pre", STRING, pre)
    w.add("tokenizer.ggml.tokens", ARRAY, tokens, STRING)
    w.add("tokenizer.ggml.token_type", ARRAY, types, I32)
    w.add("tokenizer.ggml.merges", ARRAY, merges, STRING)
    w.add("tokenizer.ggml.bos_token_id", U32, 0)
    w.add("tokenizer.ggml.eos_token_id", U32, 0)
    w.add("tokenizer.ggml.add_bos_token", BOOL, False)
    return w


def make_model(args):
    rng = np.random.default_rng(args.seed)
    text = "".join(open(p, encoding="utf-8").read() for p in args.text) if args.text else default_text()
    tokens, types, merges = build_vocab(text, args.vocab, args.pre)
    hd = args.dim // args.heads
    w = llama_writer(args.name or f"test-d{args.dim}-l{args.layers}-{args.type}", args.dim, args.layers, args.heads,
                     args.kv_heads, args.ff, args.ctx, args.vocab, tokens, types, merges, args.pre, args.rope_base)
    types_of = dict(kv.split("=", 1) for kv in args.tensor_type or [])
    unknown = [t for t in types_of.values() if t not in TYPE_NAMES]
    if unknown:
        raise SystemExit(f"ggufw: --tensor-type: unknown type {unknown[0]}")

    class Writer:  # add_tensor with the type --tensor-type gives a name, else --type's
        def __init__(self, inner):
            self.inner = inner

        def add_tensor(self, name, data, ttype):
            self.inner.add_tensor(name, data, TYPE_NAMES[types_of[name]] if name in types_of else ttype)

    ttype = TYPE_NAMES[args.type]
    writer, w = w, Writer(w)

    def mat(rows, cols, scale=1.0):
        return rng.standard_normal((rows, cols)).astype(np.float32) * (scale / np.sqrt(cols))

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(args.vocab, args.dim, np.sqrt(args.dim)), ttype)
    for l in range(args.layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", norm(args.dim), T_F32)
        w.add_tensor(p + "attn_q.weight", mat(args.heads * hd, args.dim, 2.0), ttype)
        w.add_tensor(p + "attn_k.weight", mat(args.kv_heads * hd, args.dim, 2.0), ttype)
        w.add_tensor(p + "attn_v.weight", mat(args.kv_heads * hd, args.dim), ttype)
        w.add_tensor(p + "attn_output.weight", mat(args.dim, args.heads * hd), ttype)
        w.add_tensor(p + "ffn_norm.weight", norm(args.dim), T_F32)
        w.add_tensor(p + "ffn_gate.weight", mat(args.ff, args.dim), ttype)
        w.add_tensor(p + "ffn_up.weight", mat(args.ff, args.dim), ttype)
        w.add_tensor(p + "ffn_down.weight", mat(args.dim, args.ff), ttype)
    w.add_tensor("output_norm.weight", norm(args.dim), T_F32)
    if args.untied:
        w.add_tensor("output.weight", mat(args.vocab, args.dim, 4.0), ttype)
    w = writer
    if args.drop:
        w.tensors = [t for t in w.tensors if t[0] != args.drop]
    if args.bad_shape:
        w.tensors = [(n, list(reversed(ne)) if n == args.bad_shape else ne, t, d) for n, ne, t, d in w.tensors]
    w.write(args.out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--ff", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--type", choices=sorted(TYPE_NAMES), default="f32")
    ap.add_argument("--untied", action="store_true", help="write a separate output.weight")
    ap.add_argument("--pre", choices=["gpt-2", "smollm", "default"], default="gpt-2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--name")
    ap.add_argument("--text", nargs="*", help="training text for the BPE vocabulary")
    ap.add_argument("--tensor-type", metavar="TENSOR=TYPE", action="append",
                    help="this tensor in another type than --type's (repeatable: a file that mixes types)")
    ap.add_argument("--drop", metavar="TENSOR", help="leave a tensor out (a broken file, for tests)")
    ap.add_argument("--bad-shape", metavar="TENSOR", help="swap a matrix's dimensions (a broken file, for tests)")
    args = ap.parse_args(argv)
    args.kv_heads = args.kv_heads or args.heads
    if args.vocab < 257:
        sys.exit("--vocab must be at least 257 (eos + 256 bytes)")
    make_model(args)


if __name__ == "__main__":
    main()
