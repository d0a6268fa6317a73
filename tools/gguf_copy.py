"""gguf_copy.py: a GGUF file's metadata copied into a new one, with the PyPI gguf package.

Shared by tools/gguf-dequant.py (the same model in another precision) and
tools/train/smollm2_drafts.py (drafts that keep SmolLM2's tokenizer and metadata).
"""
import gguf


def field_value(field):
    """A reader field's value, as GGUFWriter.add_key_value takes it: (value, type, array item type)."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], vtype, sub
        return [field.parts[i].tolist()[0] for i in field.data], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), vtype, None
    return field.parts[field.data[0]].tolist()[0], vtype, None


def new_writer(reader, path, override=None, keep=lambda key: True):
    """A GGUFWriter for path with the architecture and every key of reader that keep() accepts, in
    their order and types; override replaces values (keeping their types)."""
    override = override or {}
    writer = gguf.GGUFWriter(path, field_value(reader.fields["general.architecture"])[0])
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or not keep(name):
            continue  # the header's own fields; the architecture is written by GGUFWriter
        value, vtype, sub = field_value(field)
        writer.add_key_value(name, override.get(name, value), vtype, sub_type=sub)
    return writer
