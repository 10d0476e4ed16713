#!/usr/bin/python3
"""prepare_char_ref.py - what nanoGPT's data/shakespeare_char/prepare.py
writes, with the standard library only (array('H') little-endian instead of
numpy), for `nabla-gpt prepare`'s fixtures (tests/fixtures/prepare/).

    python3 tools/ref/prepare_char_ref.py INPUT.txt OUT_DIR

Mirrors the script's logic: the text read in text mode (universal newlines,
UTF-8), chars = sorted(set(data)), stoi/itos, the first int(n * 0.9)
characters for train and the rest for val, each written as uint16 ids, and
meta = {'vocab_size', 'itos', 'stoi'} pickled with protocol 4 (the default of
Python 3.8 to 3.13)."""

import os
import pickle
import sys
from array import array


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, 'r', encoding='utf-8') as f:
        data = f.read()
    print(f"length of dataset in characters: {len(data):,}")
    chars = sorted(list(set(data)))
    vocab_size = len(chars)
    print("all the unique characters:", ''.join(chars))
    print(f"vocab size: {vocab_size:,}")
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}

    def encode(s):
        return [stoi[c] for c in s]

    n = len(data)
    train_data = data[:int(n * 0.9)]
    val_data = data[int(n * 0.9):]
    os.makedirs(out, exist_ok=True)
    for name, part in (('train.bin', train_data), ('val.bin', val_data)):
        ids = array('H', encode(part))
        if sys.byteorder != 'little':
            ids.byteswap()
        with open(os.path.join(out, name), 'wb') as f:
            ids.tofile(f)
        print(f"{name} has {len(ids):,} tokens")
    meta = {'vocab_size': vocab_size, 'itos': itos, 'stoi': stoi}
    with open(os.path.join(out, 'meta.pkl'), 'wb') as f:
        pickle.dump(meta, f, protocol=4)


if __name__ == '__main__':
    main()
