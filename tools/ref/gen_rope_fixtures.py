#!/usr/bin/python3
"""gen_rope_fixtures.py - PyTorch's RoPE tables for tests/check_rope.c.

    /usr/bin/python3 tools/ref/gen_rope_fixtures.py     # writes tests/fixtures/rope/

tables.safetensors, all float64, the angle p * f_i of position p in columns i
and i + head_dim/2 (Hugging Face's and the course's layout):

  plain.cos, plain.sin       (32, 16): theta 10000, head_dim 16, positions 0..31
  llama3.inv_freq            (32): the frequencies f_i of Llama 3.2 1B (theta
                             500000, head_dim 64, rope_scaling factor 32,
                             low_freq_factor 1, high_freq_factor 4,
                             original_max_position_embeddings 8192)
  llama3.rows                (8) int64: the positions below
  llama3.cos, llama3.sin     (8, 64): those positions' rows

Written from the published definitions: f_i = theta^(-2i / head_dim); Llama 3
divides the frequencies whose wavelength 2 pi / f_i is longer than
original_max_position_embeddings / low_freq_factor by factor, keeps those
shorter than original_max_position_embeddings / high_freq_factor, and blends
the ones between, (1 - s) f_i / factor + s f_i with
s = (original_max_position_embeddings / wavelength - low_freq_factor)
    / (high_freq_factor - low_freq_factor).
Computed in float64 throughout (Hugging Face's own tables are float32).
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchref import write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "rope")


def frequencies(head_dim, theta, scaling=None):
    """f_i for i < head_dim / 2, float64; scaling = (factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings) or None."""
    f = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling is None:
        return f
    factor, low, high, length = scaling
    wavelength = 2 * math.pi / f
    s = (length / wavelength - low) / (high - low)
    between = (1 - s) * f / factor + s * f
    kept = torch.where(wavelength < length / high, f, between)
    return torch.where(wavelength > length / low, f / factor, kept)


def tables(f, positions):
    angle = positions.to(torch.float64)[:, None] * f[None, :]
    angle = torch.cat([angle, angle], -1)
    return angle.cos(), angle.sin()


def main():
    os.makedirs(OUT, exist_ok=True)
    plain_cos, plain_sin = tables(frequencies(16, 10000.0), torch.arange(32))
    f = frequencies(64, 500000.0, (32.0, 1.0, 4.0, 8192))
    rows = torch.tensor([0, 1, 2, 7, 100, 1000, 4095, 8191], dtype=torch.int64)
    cos, sin = tables(f, rows)
    write_safetensors(os.path.join(OUT, "tables.safetensors"),
                      [("plain.cos", plain_cos), ("plain.sin", plain_sin),
                       ("llama3.inv_freq", f), ("llama3.rows", rows),
                       ("llama3.cos", cos), ("llama3.sin", sin)],
                      {"torch": torch.__version__})
    print("wrote %s" % os.path.join(OUT, "tables.safetensors"))


if __name__ == "__main__":
    main()
