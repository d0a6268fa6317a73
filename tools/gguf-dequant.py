#!/usr/bin/env python3
"""gguf-dequant.py: rewrite a quantized GGUF model with F16 or F32 weights (issue #11).

Every quantized tensor (Q4_0, Q4_1, Q8_0, ...) is dequantized with the PyPI `gguf` package's own
reference dequantizers and stored as F16 or F32; F32 tensors (norms) and F16 ones stay as they are
unless --type f32 asks for F32 everywhere. Every metadata key, its type and order, the tensor names,
order and shapes are copied, and the file is written by `gguf`'s GGUFWriter, so it keeps llama.cpp's
conventions (alignment, ne order, general.file_type updated to the new type) and llama.cpp's tools
load it.

    .venv/bin/python tools/gguf-dequant.py models/cache/SmolLM2-135M-Instruct.Q4_1.gguf --type f16 \\
        --out models/cache/SmolLM2-135M-Instruct.F16.gguf
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

FILE_TYPE = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16}


def field_value(field):
    """A reader field's value, as GGUFWriter.add_key_value takes it."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], vtype, sub
        return [field.parts[i].tolist()[0] for i in field.data], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), vtype, None
    return field.parts[field.data[0]].tolist()[0], vtype, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--type", choices=("f16", "f32"), required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.src)
    arch = reader.fields["general.architecture"]
    writer = gguf.GGUFWriter(args.out, field_value(arch)[0])
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header's own fields; the architecture is written by GGUFWriter
        value, vtype, sub = field_value(field)
        if name == "general.file_type":
            value = int(FILE_TYPE[args.type])
        writer.add_key_value(name, value, vtype, sub_type=sub)
    target = np.float16 if args.type == "f16" else np.float32
    for t in reader.tensors:
        if t.tensor_type == Q.F32 and args.type == "f16":
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
