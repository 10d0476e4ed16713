#!/usr/bin/python3
"""matrix_coverage.py - fails when a public function has no bad-input case.

Lists every function declared in include/nabla.h and include/nabla/*.h
(comments and preprocessor lines removed; a name counts as declared when
`nb_<name>(` follows a return type at the top level) and looks for a call
`nb_<name>(` in tests/check_matrix*.c or in the call of an NB_OP row of
include/nabla/ops.def (tests/check_matrix_ops.c runs its battery on every
such row, through tools/support/op_rows.h). Prints the coverage and, one a line,
the functions that have no case; exits 1 if there are any.

    python3 tools/test/matrix_coverage.py [REPO_DIR]

Uses only the Python standard library."""
import glob
import os
import re
import sys

DECL = re.compile(r"(?:^|[;}])\s*(?:const\s+)?(?:struct\s+)?[A-Za-z_][A-Za-z0-9_]*[\s*]+"
                  r"(nb_[a-z0-9_]+)\s*\(", re.M)


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Preprocessor lines, with their continuations.
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def public_functions(root):
    names = []
    headers = [os.path.join(root, "include", "nabla.h")]
    headers += sorted(glob.glob(os.path.join(root, "include", "nabla", "*.h")))
    for h in headers:
        with open(h, encoding="utf-8") as f:
            text = strip(f.read())
        text = re.sub(r"typedef[^;]*;", ";", text)  # function pointer types
        for m in DECL.finditer(text):
            if m.group(1) not in names:
                names.append((m.group(1), os.path.relpath(h, root)))
    seen, out = set(), []
    for n, h in names:
        if n not in seen:
            seen.add(n)
            out.append((n, h))
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    files = sorted(glob.glob(os.path.join(root, "tests", "check_matrix*.c")))
    tests = ""
    for t in files:
        with open(t, encoding="utf-8") as f:
            tests += strip(f.read())
    # the NB_OP rows' calls: every nb_<name>( of ops.def outside its strings
    with open(os.path.join(root, "include", "nabla", "ops.def"), encoding="utf-8") as f:
        rows = re.sub(r'"(?:[^"\\]|\\.)*"', '""', strip(f.read()))
    tests += rows
    funcs = public_functions(root)
    missing = [(n, h) for n, h in funcs if not re.search(r"\b%s\s*\(" % re.escape(n), tests)]
    covered = len(funcs) - len(missing)
    print("matrix coverage: %d of %d public functions have a case in tests/check_matrix*.c"
          % (covered, len(funcs)))
    if missing:
        print("matrix coverage: FAIL, no case calls these (add one, see the top comment of "
              "tests/check_matrix_ops.c):")
        for n, h in missing:
            print("  %s  (%s)" % (n, h))
        return 1
    print("matrix coverage: PASS (100%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
