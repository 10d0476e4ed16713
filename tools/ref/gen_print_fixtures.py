#!/usr/bin/python3
"""gen_print_fixtures.py - PyTorch's repr of a table of tensors, for
tests/check_print.c, which prints the same tensors with nabla and compares
the text byte for byte.

Run with Debian's interpreter, where python3-torch (1.13) lives; CI has no
torch and only reads the committed file:

    /usr/bin/python3 tools/ref/gen_print_fixtures.py   # writes tests/fixtures/print.txt

The file is plain text, one case after another:

    case NAME
    dtype f32|f64|i64|bool
    shape D0 D1 ...            (nothing after "shape" for a 0-d tensor)
    opts PRECISION THRESHOLD EDGEITEMS LINEWIDTH SCI   (SCI: -1 auto, 0, 1)
    data V V ...               (floats as float.hex(), nan, inf, -inf;
                                integers in decimal; bools 0/1)
    repr N                     (then N lines: repr(t), exactly)
"""
import math
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                   "print.txt")
DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}
DEFAULT = (4, 1000, 3, 80, -1)


def value_text(v, dtype):
    if dtype == torch.bool:
        return "1" if v else "0"
    if dtype == torch.int64:
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v.hex()


def case(out, name, t, opts=DEFAULT):
    precision, threshold, edgeitems, linewidth, sci = opts
    torch.set_printoptions(precision=precision, threshold=threshold, edgeitems=edgeitems,
                           linewidth=linewidth, sci_mode=None if sci < 0 else bool(sci))
    text = repr(t)
    torch.set_printoptions(profile="default")
    lines = text.split("\n")
    out.append("case " + name)
    out.append("dtype " + DTYPES[t.dtype])
    out.append(" ".join(["shape"] + [str(d) for d in t.shape]))
    out.append("opts %d %d %d %d %d" % opts)
    out.append(" ".join(["data"] + [value_text(v, t.dtype) for v in t.reshape(-1).tolist()]))
    out.append("repr %d" % len(lines))
    out.extend(lines)


def main():
    torch.manual_seed(1913)
    f32, f64 = torch.float32, torch.float64
    nan, inf = float("nan"), float("inf")
    out = ["# PyTorch %s repr fixtures, written by tools/ref/gen_print_fixtures.py" % torch.__version__]
    T = torch.tensor
    case(out, "tiny", T([1e-10, 1.0]))
    case(out, "tiny_alone", T([3e-7, -5e-6], dtype=f64))
    case(out, "huge", T([1e10, 2.5e12, -3.25]))
    case(out, "huge_int_mode", T([1.0, 1e9]))
    case(out, "int_mode_ratio", T([1.0, -2000.0, 3.0]))
    case(out, "just_below_1e8", T([99999999.0, 1.5], dtype=f64))
    case(out, "ratio_sci", T([0.001, 2.5]))
    case(out, "small_fixed", T([0.001, 0.5]))
    case(out, "mixed_sign", T([-0.5337, 0.1051, 2.0, -1.25]))
    case(out, "negative_zero", T([-0.0, 0.5]))
    case(out, "negative_zero_int", T([-0.0, 2.0]))
    case(out, "zeros", torch.zeros(3))
    case(out, "nan_inf", T([nan, inf, -inf, 1.5, 0.0]))
    case(out, "nan_inf_int", T([nan, 2.0, -inf]))
    case(out, "only_nan", T([nan, nan]))
    case(out, "inf_sci", T([inf, 1e-8, 1.0]))
    case(out, "whole", T([[2.0, 2.0, 0.0], [0.0, 0.0, 2.0]]))
    case(out, "scalar_f32", T(1.8524))
    case(out, "scalar_f64", T(1.8524, dtype=f64))
    case(out, "scalar_tiny", T(1e-5))
    case(out, "scalar_int", T(7))
    case(out, "scalar_bool", T(True))
    case(out, "rows_2d", torch.randn(4, 3))
    case(out, "wrap_long_row", torch.randn(3, 20))
    case(out, "wrap_f64_suffix", torch.randn(8, dtype=f64))
    case(out, "wrap_f64_2d", torch.randn(2, 8, dtype=f64))
    case(out, "four_d", torch.randn(2, 3, 2, 2))
    case(out, "four_d_f64", torch.randn(2, 1, 2, 3, dtype=f64) * 100)
    case(out, "three_d_sci", torch.randn(2, 2, 3) * 1e-6)
    case(out, "big_2d", torch.randn(40, 50))
    case(out, "big_1d", torch.arange(2000, dtype=f32) / 7)
    case(out, "big_3d", torch.randn(10, 10, 12))
    case(out, "big_4d_f64", torch.randn(5, 4, 8, 7, dtype=f64))
    case(out, "big_one_long_dim", torch.randn(2, 600))
    case(out, "big_whole", torch.arange(1500, dtype=f32).reshape(30, 50))
    case(out, "int64", T([0, -4, 123456, 7]))
    case(out, "int64_2d", T([[1, -20], [300, 4]]))
    case(out, "int64_big", torch.arange(1500).reshape(3, 500))
    case(out, "bool", T([[True, False], [False, True]]))
    case(out, "bool_big", torch.arange(1200).reshape(40, 30) % 3 == 0)
    case(out, "precision_2", torch.randn(2, 3), (2, 1000, 3, 80, -1))
    case(out, "precision_8_f64", torch.randn(3, dtype=f64), (8, 1000, 3, 80, -1))
    case(out, "threshold_10", torch.randn(4, 5), (4, 10, 2, 80, -1))
    case(out, "edgeitems_1", torch.randn(30), (4, 10, 1, 80, -1))
    case(out, "linewidth_40", torch.randn(12), (4, 1000, 3, 40, -1))
    case(out, "linewidth_40_f64", torch.randn(2, 4, dtype=f64), (4, 1000, 3, 40, -1))
    case(out, "sci_on", T([0.5, 2.0, -3.0]), (4, 1000, 3, 80, 1))
    case(out, "sci_off", T([1e-10, 1.0]), (4, 1000, 3, 80, 0))
    case(out, "sci_on_whole", T([1.0, 20.0]), (3, 1000, 3, 80, 1))
    # five to eight dims
    case(out, "dims_5", (torch.arange(24, dtype=f32) * 0.5 - 3).reshape(2, 1, 3, 2, 2))
    case(out, "dims_8", (torch.arange(24, dtype=f64) * 0.25).reshape(1, 2, 1, 2, 3, 1, 1, 2))
    case(out, "dims_6_summarized", torch.arange(2 * 3 * 2 * 2 * 3 * 30, dtype=f32)
         .reshape(2, 3, 2, 2, 3, 30))
    with open(OUT, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %s (%d cases)" % (os.path.relpath(OUT), sum(l.startswith("case ") for l in out)))


if __name__ == "__main__":
    sys.exit(main())
