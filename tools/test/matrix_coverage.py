#!/usr/bin/python3
"""matrix_coverage.py - fails when a public function has no bad-input case,
or no row in the argument-kind table.

Lists every function declared in include/nabla.h and include/nabla/*.h
(comments and preprocessor lines removed; a name counts as declared when
`nb_<name>(` follows a return type at the top level) and looks for a call
`nb_<name>(` in tests/check_matrix*.c or in the call of an NB_OP row of
include/nabla/ops.def (tests/check_matrix_ops.c runs its battery on every
such row, through tools/support/op_rows.h). Then reads the kind table of
tests/check_matrix_kinds.c (rows {"nb_name", "kind kind ...", driver}) and
checks that every function has a row with one kind per argument, each kind
fitting the argument's C type (an int64_t is a size, a double a float, a
const char * a string, text or path...), and a driver when a kind is one
the test generates values for. Prints the coverage and, one a line, the
functions that fail either check; exits 1 if there are any.

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


# The kinds a C type may have; generated kinds get adversarial values from
# tests/check_matrix_kinds.c, the others are the hand-written matrix's.
GENERATED = {"size", "int", "count", "usize", "seed", "float", "string", "text", "strs",
             "list", "path_in", "path_out"}
OTHER = {"ctx", "tensor", "tensors", "out", "ptr", "ints", "rng", "fn", "user", "file", "enum",
         "bool", "len"}
FITS = [  # (C type pattern, the generated kinds it may have)
    (r"(const )?(int64_t|long)$", {"size", "count"}),
    (r"int$", {"int", "count", "len"}),
    (r"size_t$", {"usize", "len"}),
    (r"(uint64_t|uint32_t)$", {"seed"}),
    (r"double$", {"float"}),
    (r"const char \*$", {"string", "text", "path_in", "path_out"}),
    (r"(const )?nb_tensor_list \*$", {"list"}),
    (r"const char \*const \*$", {"strs"}),
]
KIND_ROW = re.compile(r'\{\s*"(nb_[a-z0-9_]+)"\s*,\s*"([^"]*)"\s*,\s*([A-Za-z0-9_]+)\s*\}')


def arg_types(root):
    """Each public function's argument types, in order ("..." dropped)."""
    out = {}
    headers = [os.path.join(root, "include", "nabla.h")]
    headers += sorted(glob.glob(os.path.join(root, "include", "nabla", "*.h")))
    for h in headers:
        with open(h, encoding="utf-8") as f:
            text = strip(f.read())
        text = re.sub(r"typedef[^;]*;", ";", text)
        for m in DECL.finditer(text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            args, depth, cur = [], 0, ""
            for c in text[m.end():i - 1]:
                if c == "," and depth == 0:
                    args.append(cur)
                    cur = ""
                    continue
                depth += {"(": 1, ")": -1}.get(c, 0)
                cur += c
            args.append(cur)
            types = []
            for a in (" ".join(a.split()) for a in args):
                if a in ("", "void", "..."):
                    continue
                if "(" in a:  # a function pointer
                    types.append("fn")
                    continue
                t = re.sub(r"\s*\b[A-Za-z_][A-Za-z0-9_]*$", "", a)
                types.append(re.sub(r"\s*\*", " *", t).replace("* *", "**").strip())
            out.setdefault(m.group(1), types)
    return out


def kind_problems(root, funcs):
    """A line per function whose kind row is missing or does not fit."""
    path = os.path.join(root, "tests", "check_matrix_kinds.c")
    with open(path, encoding="utf-8") as f:
        rows = {m.group(1): (m.group(2), m.group(3)) for m in KIND_ROW.finditer(strip(f.read()))}
    types = arg_types(root)
    bad = []
    for n, h in funcs:
        if n not in rows:
            bad.append("%s  (%s): no row in the kind table of tests/check_matrix_kinds.c" % (n, h))
            continue
        kinds, drv = rows[n]
        real, _, fields = kinds.partition("|")
        ks = real.split()
        ts = types.get(n, [])
        if len(ks) != len(ts):
            bad.append("%s: the kind table gives %d kinds, the function takes %d arguments"
                       % (n, len(ks), len(ts)))
            continue
        gen = False
        for i, (k, t) in enumerate(zip(ks, ts)):
            base = k.split(":")[0]
            if base not in GENERATED | OTHER:
                bad.append("%s: argument %d has an unknown kind '%s'" % (n, i, k))
                continue
            fits = [kinds for pat, kinds in FITS if re.match(pat, t)]
            if base in GENERATED and not (fits and base in fits[0]):
                bad.append("%s: argument %d (%s) cannot be of kind '%s'" % (n, i, t, k))
            elif fits and base not in fits[0] and base not in ("len", "ptr"):
                bad.append("%s: argument %d (%s) needs one of the kinds %s, not '%s'"
                           % (n, i, t, "/".join(sorted(fits[0])), k))
            gen |= base in GENERATED
        for k in fields.split():
            gen |= k.split(":")[0] in GENERATED
        if gen and drv == "NULL":
            bad.append("%s: takes generated kinds but has no driver" % n)
    return bad


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
    bad = kind_problems(root, funcs)
    if bad:
        print("matrix coverage: FAIL, the argument-kind table (tests/check_matrix_kinds.c, see "
              "its top comment):")
        for b in bad:
            print("  " + b)
        return 1
    print("matrix coverage: PASS (100%%); the kind table covers all %d functions' arguments"
          % len(funcs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
