#!/usr/bin/env python3
"""gguf-dequant.py: rewrite a quantized GGUF model with F16 or F32 weights (issue #11).

Every quantized tensor (Q4_0, Q4_1, Q8_0, ...) is dequantized with the PyPI `gguf` package's own
reference dequantizers and stored as F16 or F32; F32 tensors (norms) and F16 ones stay as they are
unless --type f32 asks for F32 everywhere. With --type f16 --matrices, F32 matrices (tensors of two
or more dimensions) become F16 too and only vectors (norms) stay F32: how the bundled drafts' F32
files from tools/train/train.py became F16 (docs/models.md). Every metadata key, its type and
order, the tensor names, order and shapes are copied, and the file is written by `gguf`'s
GGUFWriter, so it keeps llama.cpp's conventions (alignment, ne order, general.file_type updated to
the new type) and llama.cpp's tools load it.

    .venv/bin/python tools/gguf-dequant.py models/cache/SmolLM2-135M-Instruct.Q4_1.gguf --type f16 \\
        --out models/cache/SmolLM2-135M-Instruct.F16.gguf
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

from gguf_copy import new_writer

FILE_TYPE = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--type", choices=("f16", "f32"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--matrices", action="store_true", help="with --type f16: F32 matrices to F16 too")
    args = ap.parse_args()
    if args.matrices and args.type != "f16":
        ap.error("--matrices goes with --type f16")
    reader = gguf.GGUFReader(args.src)
    writer = new_writer(reader, args.out, {"general.file_type": int(FILE_TYPE[args.type])})
    target = np.float16 if args.type == "f16" else np.float32
    for t in reader.tensors:
        if t.tensor_type == Q.F32 and args.type == "f16" and (len(t.shape) < 2 or not args.matrices):
            data = np.array(t.data, dtype=np.float32)  # norms stay F32, as llama.cpp's F16 files keep them
        else:
            data = gguf.quants.dequantize(t.data, t.tensor_type).astype(target)
        shape = tuple(int(x) for x in reversed(t.shape))  # numpy order: the reverse of GGUF's ne
        writer.add_tensor(t.name, data.reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"gguf-dequant: {args.out} ({args.type}, {len(reader.tensors)} tensors)")


if __name__ == "__main__":
    sys.exit(main())
