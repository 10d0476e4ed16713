#!/usr/bin/env python3
"""List the tensors in safetensors files, using only the standard library.

Usage:
    python3 tools/ref/safetensors_check.py FILE [FILE ...]

For each file, prints the header size, the "__metadata__" pairs if any, and
one line per tensor in data order: name, dtype, shape and byte range. Handy
for checking what nabla's nb_save_safetensors wrote, or what a file from
PyTorch holds, on machines without torch or the safetensors package.

It also checks the file's structure the way nabla's loader does (header
size within the file, valid JSON object, no duplicate names, byte sizes that
match shape and dtype, tensors that tile the data region exactly) and prints
what is wrong. The exit status is 0 when every file is well formed, 1
otherwise.
"""

import json
import struct
import sys

MAX_HEADER = 100_000_000  # what the reference implementation accepts

DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


def _no_duplicates(pairs):
    """object_pairs_hook for json.loads: a dict, refusing repeated keys."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def check(path):
    """Prints the contents of one file; returns a list of problems found."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        return [f"file is {len(blob)} bytes, too short for the header size"]
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        return [f"header size {n} exceeds the {MAX_HEADER}-byte limit"]
    if n > len(blob) - 8:
        return [f"header size {n} runs past the end of the file ({len(blob)} bytes)"]
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        return [f"bad header: {e}"]
    if not isinstance(header, dict):
        return ["header is not a JSON object"]

    data_len = len(blob) - 8 - n
    print(f"{path}: header {n} bytes, data {data_len} bytes")
    problems = []
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            problems.append("__metadata__ is not an object of strings")
        else:
            for key, value in meta.items():
                print(f"  meta {key!r}: {value!r}")

    entries = []
    for name, info in header.items():
        try:
            dtype, shape = info["dtype"], info["shape"]
            begin, end = info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            problems.append(f"{name!r}: entry lacks dtype, shape or [begin, end] offsets")
            continue
        entries.append((begin, end, name, dtype, shape))
        size = DTYPE_SIZES.get(dtype)
        if size is None:
            problems.append(f"{name!r}: unknown dtype {dtype!r}")
            continue
        count = 1
        for d in shape:
            count *= d
        if end - begin != count * size:
            problems.append(f"{name!r}: offsets hold {end - begin} bytes, "
                            f"{dtype} {shape} needs {count * size}")

    pos = 0
    for begin, end, name, dtype, shape in sorted(entries, key=lambda e: (e[0], e[1])):
        print(f"  {name}  {dtype}  {list(shape)}  [{begin}, {end})")
        if begin != pos:
            problems.append(f"{name!r} starts at {begin}, expected {pos} "
                            f"({'overlap' if begin < pos else 'gap'})")
        pos = max(pos, end)
    if pos != data_len:
        problems.append(f"tensors end at byte {pos} of a {data_len}-byte data region")
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    ok = True
    for path in argv[1:]:
        try:
            problems = check(path)
        except OSError as e:
            problems = [str(e)]
        for p in problems:
            print(f"{path}: error: {p}")
        ok = ok and not problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
