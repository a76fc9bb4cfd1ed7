#!/usr/bin/env python3
"""requantize: rewrite a GGUF model with its 2-D weights in another quantisation type, so the
benchmarks and tests can run more than one weight type on real weights.

  .venv/bin/python scripts/requantize.py IN.gguf OUT.gguf --type Q8_0|Q4_0|Q4_1|Q5_0|Q5_1
      [--layers K]

With --layers K, OUT keeps only the first K transformer blocks (blk.0 .. blk.K-1) and says so
in {arch}.block_count: a smaller model with the real tokenizer, embedding and first layers,
e.g. one that fits where the full file cannot travel (the GPU check's bundle).

What OUT holds:
  * Every metadata key/value of IN, in IN's order and with the same value types (strings and
    string arrays such as tokenizer.ggml.tokens byte for byte), except general.file_type, which
    is set to llama.cpp's LLAMA_FTYPE for the target (Q4_0=2, Q4_1=3, Q8_0=7, Q5_0=8,
    Q5_1=9).
  * The tensors of IN, in IN's order, with IN's names and dims:
      - 1-D tensors (norms) as F32 (copied when already F32, else dequantised);
      - every tensor of 2 or more dims dequantised (gguf.quants.dequantize) and quantised
        again (gguf.quants.quantize) to the target type. A tensor that is already of the
        target type is copied unchanged (what requantising it would give at best, bit-exact and
        faster). A tensor whose rows (ne0) are not a whole number of blocks is copied unchanged
        with a warning.
Dims: GGUFReader's tensor.shape is in ggml order (ne0 = row length first) while tensor.data is
the row-major numpy array (rows, ..., ne0) -- in bytes for quantised types. The weights are
rebuilt in numpy order and handed to GGUFWriter with the byte shape of the quantised array
(raw_shape) and raw_dtype, so that the file's dims come out equal to IN's.

The file is written to OUT.tmp, read back and checked (names, dims, types, metadata keys), and
only then renamed to OUT: an interrupted or failed run never leaves a half-written OUT, and
running the same command again simply replaces it.
"""
import argparse
import os
import pathlib
import sys
import time
from collections import defaultdict

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as VT

TARGETS = {"Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1, "Q8_0": QT.Q8_0, "Q5_0": QT.Q5_0, "Q5_1": QT.Q5_1}
# llama.cpp LLAMA_FTYPE_MOSTLY_* (gguf.LlamaFileType) for general.file_type.
FILE_TYPES = {QT.Q4_0: int(gguf.LlamaFileType.MOSTLY_Q4_0),
              QT.Q4_1: int(gguf.LlamaFileType.MOSTLY_Q4_1),
              QT.Q8_0: int(gguf.LlamaFileType.MOSTLY_Q8_0),
              QT.Q5_0: int(gguf.LlamaFileType.MOSTLY_Q5_0),
              QT.Q5_1: int(gguf.LlamaFileType.MOSTLY_Q5_1)}
FILE_TYPE_KEY = gguf.Keys.General.FILE_TYPE            # "general.file_type"
ARCH_KEY = gguf.Keys.General.ARCHITECTURE              # "general.architecture"
ALIGNMENT_KEY = gguf.Keys.General.ALIGNMENT            # "general.alignment"


def fail(msg, code=1):
    print(f"requantize: {msg}", file=sys.stderr)
    sys.exit(code)


def ggml_dims(tensor):
    """The tensor's dims in ggml order (ne0 first), as ints."""
    return [int(d) for d in tensor.shape]


def field_value(field):
    """(value, type, sub_type) of a reader field, ready for GGUFWriter.add_key_value. Strings
    are returned as their raw bytes so they round-trip exactly, whatever they contain."""
    vtype = VT(field.types[0])
    if vtype == VT.STRING:
        return bytes(field.parts[-1]), vtype, None
    if vtype == VT.ARRAY:
        if len(field.types) != 2:
            raise ValueError(f"{field.name}: nested arrays are not supported")
        sub = VT(field.types[1])
        if not field.data:
            raise ValueError(f"{field.name}: empty arrays cannot be written by gguf.GGUFWriter")
        if sub == VT.STRING:
            return [bytes(field.parts[i]) for i in field.data], vtype, sub
        return field.contents(), vtype, sub
    return field.contents(), vtype, None


def copy_metadata(reader, writer, target, block_count=None):
    """Every key of reader except the GGUF.* header pseudo-fields, in order; general.file_type
    replaced (added when IN has none), and {arch}.block_count when block_count is given.
    Returns the list of keys written."""
    keys = []
    arch = reader.fields[ARCH_KEY].contents()
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        keys.append(name)
        if name == ARCH_KEY:
            continue  # GGUFWriter(path, arch) has already added it, with the same value
        if name == f"{arch}.block_count" and block_count is not None:
            writer.add_key_value(name, block_count, VT(field.types[0]))
            continue
        if name == FILE_TYPE_KEY:
            writer.add_key_value(name, FILE_TYPES[target], VT(field.types[0]))
            continue
        value, vtype, sub = field_value(field)
        if name == ALIGNMENT_KEY:
            writer.add_custom_alignment(int(value))  # also sets the writer's data padding
            continue
        writer.add_key_value(name, value, vtype, sub)
    if FILE_TYPE_KEY not in keys:
        writer.add_uint32(FILE_TYPE_KEY, FILE_TYPES[target])
        keys.append(FILE_TYPE_KEY)
    return keys


def convert_tensor(tensor, target):
    """(payload for add_tensor, raw_dtype, note). payload is in numpy (row-major) order: F32
    values, or the quantised bytes (rows, ..., bytes per row)."""
    src = tensor.tensor_type
    dims = ggml_dims(tensor)
    np_shape = tuple(reversed(dims))
    if len(dims) == 1:
        if src == QT.F32:
            return np.asarray(tensor.data, dtype=np.float32).reshape(np_shape), QT.F32, None
        values = gguf.quants.dequantize(tensor.data, src).astype(np.float32, copy=False)
        return values.reshape(np_shape), QT.F32, None
    block_size, _ = gguf.GGML_QUANT_SIZES[target]
    if src == target or dims[0] % block_size != 0:
        note = None if src == target else (
            f"warning: {tensor.name}: row length {dims[0]} is not a multiple of {block_size}, "
            f"kept as {src.name}")
        return np.asarray(tensor.data), src, note
    values = gguf.quants.dequantize(tensor.data, src).astype(np.float32, copy=False)
    values = values.reshape(np_shape)
    quantised = gguf.quants.quantize(values, target)
    assert quantised.shape == gguf.quant_shape_to_byte_shape(np_shape, target), tensor.name
    return quantised, target, None


def kept_tensors(reader, layers):
    """IN's tensors in order; with `layers`, those of blocks past the first `layers` left out."""
    def keep(name):
        parts = name.split(".")
        return layers is None or parts[0] != "blk" or int(parts[1]) < layers
    return [t for t in reader.tensors if keep(t.name)]


def check_output(path, reader, keys, tensors, expected):
    """Re-reads the written file and checks it against what was meant to be written."""
    out = gguf.GGUFReader(str(path))
    out_keys = [k for k in out.fields if not k.startswith("GGUF.")]
    if sorted(out_keys) != sorted(keys):
        raise RuntimeError(f"metadata keys differ: missing {sorted(set(keys) - set(out_keys))}, "
                           f"extra {sorted(set(out_keys) - set(keys))}")
    if len(out.tensors) != len(tensors):
        raise RuntimeError(f"{len(out.tensors)} tensors written, {len(tensors)} expected")
    for got, src, qtype in zip(out.tensors, tensors, expected):
        if got.name != src.name or ggml_dims(got) != ggml_dims(src) or got.tensor_type != qtype:
            raise RuntimeError(
                f"tensor {src.name} {ggml_dims(src)} {qtype.name} read back as "
                f"{got.name} {ggml_dims(got)} {got.tensor_type.name}")
    ft = out.fields[FILE_TYPE_KEY].contents()
    tok = out.fields.get("tokenizer.ggml.tokens")
    if tok is not None and len(tok.data) != len(reader.fields["tokenizer.ggml.tokens"].data):
        raise RuntimeError("tokenizer.ggml.tokens has a different length")
    return ft


def requantize(src_path, dst_path, target, layers=None):
    t0 = time.monotonic()
    reader = gguf.GGUFReader(str(src_path))
    if reader.byte_order != "I":
        fail(f"{src_path}: byte-swapped (big-endian) GGUF files are not supported")
    if ARCH_KEY not in reader.fields:
        fail(f"{src_path}: no {ARCH_KEY} key: not a model file")
    arch = reader.fields[ARCH_KEY].contents()
    if layers is not None:
        count_key = f"{arch}.block_count"
        if count_key not in reader.fields:
            fail(f"{src_path}: no {count_key} key: --layers needs it")
        have = int(reader.fields[count_key].contents())
        if not 1 <= layers <= have:
            fail(f"--layers {layers}: the model has {have} blocks (want 1..{have})")
    tensors = kept_tensors(reader, layers)

    tmp_path = dst_path.with_name(dst_path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp_path), arch)
    try:
        keys = copy_metadata(reader, writer, target, layers)
        summary = defaultdict(lambda: {"n": 0, "params": 0, "bytes": 0, "from": defaultdict(int)})
        expected = []
        for tensor in tensors:
            payload, qtype, note = convert_tensor(tensor, target)
            if note:
                print(note, file=sys.stderr)
            writer.add_tensor(tensor.name, payload, raw_shape=payload.shape, raw_dtype=qtype)
            expected.append(qtype)
            s = summary[qtype]
            s["n"] += 1
            s["params"] += int(tensor.n_elements)
            s["bytes"] += int(payload.nbytes)
            s["from"][tensor.tensor_type.name] += 1
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        file_type = check_output(tmp_path, reader, keys, tensors, expected)
        os.replace(tmp_path, dst_path)
    except BaseException:
        writer.close()
        tmp_path.unlink(missing_ok=True)
        raise

    for qtype, s in sorted(summary.items(), key=lambda kv: -kv[1]["bytes"]):
        sources = ", ".join(f"{n} from {name}" for name, n in sorted(s["from"].items()))
        print(f"{qtype.name:>5}: {s['n']:4d} tensors, {s['params'] / 1e6:8.2f} M params, "
              f"{s['bytes'] / 2**20:8.2f} MiB ({sources})")
    size = dst_path.stat().st_size
    print(f"wrote {dst_path}: {size} bytes ({size / 2**20:.2f} MiB), general.file_type="
          f"{file_type}, {len(keys)} metadata keys, {time.monotonic() - t0:.1f} s")


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Re-quantise the 2-D weights of a GGUF model to another type "
                    "(1-D tensors stay F32; metadata is copied, general.file_type updated).")
    p.add_argument("input", type=pathlib.Path, metavar="IN.gguf")
    p.add_argument("output", type=pathlib.Path, metavar="OUT.gguf")
    p.add_argument("--type", required=True, choices=sorted(TARGETS), dest="qtype",
                   help="target type of the 2-D weights")
    p.add_argument("--layers", type=int, default=None, metavar="K",
                   help="keep only the first K transformer blocks (default: all)")
    args = p.parse_args(argv)
    if not args.input.is_file():
        p.error(f"input {args.input} does not exist or is not a file")
    if args.output.exists() and args.output.resolve() == args.input.resolve():
        p.error("OUT.gguf must not be the input file")
    if args.output.is_dir():
        p.error(f"output {args.output} is a directory")
    if not args.output.resolve().parent.is_dir():
        p.error(f"directory of {args.output} does not exist")
    try:
        requantize(args.input, args.output, TARGETS[args.qtype], args.layers)
    except (ValueError, RuntimeError, OSError) as e:
        fail(f"{args.input}: {e}")


if __name__ == "__main__":
    main()
