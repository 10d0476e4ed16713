#!/usr/bin/python3
"""gen_example_fixtures.py - runs the PyTorch twins of the second-order
examples and writes what they print to tests/fixtures/examples/<name>.txt,
which tests/check_examples_grad.c compares with the C examples' output,
number by number. Run with Debian's interpreter, where python3-torch lives
(CI has no torch and only reads the committed files):

    /usr/bin/python3 tools/ref/gen_example_fixtures.py [NAME ...]

NAME is gradient_penalty, maml_sine, pinn_poisson or per_sample_dp (default:
all four);
the twin of examples/NAME.c is tools/ref/NAME_ref.py. Each file starts with
one '#' line saying where it came from; the rest is the twin's stdout.
"""
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "..", "tests", "fixtures", "examples")
NAMES = ["gradient_penalty", "maml_sine", "pinn_poisson", "per_sample_dp"]


def main():
    names = sys.argv[1:] or NAMES
    for name in names:
        if name not in NAMES:
            sys.exit("gen_example_fixtures.py: unknown example '%s' (one of %s)"
                     % (name, ", ".join(NAMES)))
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in names:
        script = os.path.join(HERE, name + "_ref.py")
        out = subprocess.run([sys.executable, script], check=True, capture_output=True,
                             text=True, cwd=HERE).stdout
        path = os.path.join(OUT_DIR, name + ".txt")
        with open(path, "w") as f:
            f.write("# tools/ref/%s_ref.py (torch %s, float64), the twin of examples/%s.c\n"
                    % (name, torch.__version__, name))
            f.write(out)
        print("wrote %s (%d lines)" % (os.path.relpath(path), out.count("\n")))


if __name__ == "__main__":
    main()
