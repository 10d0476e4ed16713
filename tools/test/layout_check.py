#!/usr/bin/python3
"""layout_check.py - fails when a file or a function is too long to walk, or
when a layer of src/ reaches into a layer above it.

The limits: no source file in src/ over 600 lines, and no function (or
multi-line macro) in the .c and .h files of src/, tools/ and examples/ over
80 lines unless the comment block just above it gives a reason, a sentence
starting with "Long:".

The layers: a file in src/F/ may include a header of src/X/ (written
"X/name.h", as in #include "X/X_internal.h") only when X is F itself or a
layer below F in LAYERS. Layers on one level are peers and may not include
each other's headers.

A function runs from the first line of its header to its closing brace.
Functions are found with a small C scanner: comments, strings and character
literals are blanked, preprocessor lines are set aside, and a '{' at the top
level (outside braces and parentheses) opens a function body when the text
before it ends with ')' and holds no '=' outside parentheses (so
initializers, structs and enums are not functions). A #define with
continuation lines counts from its first line to its last.

    python3 tools/test/layout_check.py [REPO_DIR]

Prints the offenders one a line as path:line, then a summary line; exits 1
if there are any. Uses only the Python standard library."""

import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNC_LINES = 80
FILE_DIRS = ("src",)
FUNC_DIRS = ("src", "tools", "examples")
REASON = "Long:"

# The layer order of src/, lowest first; the folders on one level are peers.
# io sits above optim because a checkpoint saves an optimizer's state
# (io/checkpoint.c, io/optim_state.c read optim/optim_internal.h).
LAYERS = (
    ("core",),
    ("kernels",),
    ("tape",),
    ("ops",),
    ("nn", "optim", "teach", "gradcheck", "data"),
    ("io",),
)
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}
INCLUDE = re.compile(r'^\s*#\s*include\s*"(?:\.\./)*(\w+)/[^"]*"')


def blank_comments_and_strings(text):
    """text with comments, strings and character literals replaced by spaces
    (newlines kept, so line numbers stay), and for each line whether it holds
    a comment."""
    out = []
    has_comment = set()
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            line += 1
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for ch in text[i:end]:
                has_comment.add(line)
                if ch == "\n":
                    line += 1
                out.append("\n" if ch == "\n" else " ")
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            has_comment.add(line)
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), has_comment


def preprocessor_spans(lines):
    """(first, last) 1-based line spans of the preprocessor directives, each
    with its continuation lines; and whether each is a #define."""
    spans = []
    k = 0
    while k < len(lines):
        if lines[k].lstrip().startswith("#"):
            first = k
            while lines[k].rstrip().endswith("\\") and k + 1 < len(lines):
                k += 1
            is_define = re.match(r"\s*#\s*define\b", lines[first]) is not None
            spans.append((first + 1, k + 1, is_define))
        k += 1
    return spans


def reason_above(orig_lines, has_comment, code_lines, start):
    """Whether the comment block ending just above line `start` (1-based)
    says "Long:"."""
    k = start - 1
    block = []
    while k >= 1 and k in has_comment and not code_lines[k - 1].strip():
        block.append(orig_lines[k - 1])
        k -= 1
    return any(REASON in b for b in block)


def functions(path):
    """(name, first line, last line, has reason) for each function and
    multi-line macro in the file."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    orig = text.split("\n")
    code, has_comment = blank_comments_and_strings(text)
    lines = code.split("\n")
    found = []
    pp_line = set()
    for first, last, is_define in preprocessor_spans(lines):
        pp_line.update(range(first, last + 1))
        if is_define and last > first:
            name = re.match(r"\s*#\s*define\s+(\w+)", lines[first - 1])
            found.append((name.group(1) if name else "?", first, last,
                          reason_above(orig, has_comment, lines, first)))

    depth = 0             # braces
    paren = 0             # parentheses at the top level (a '{' inside one is a
                          # compound literal in a macro call, not a body)
    pending = []          # (line, text) since the last top-level item ended
    body = None           # (name, header line) of the function being read
    for no, line in enumerate(lines, 1):
        if no in pp_line:
            continue
        for ch in line:
            if depth == 0 and ch == "{" and paren == 0:
                head = "".join(t for _, t in pending).strip()
                is_func = head.endswith(")") and not re.search(r"=", strip_parens(head))
                if is_func:
                    start = header_start(pending)
                    body = (function_name(head), start)
                else:
                    body = None
                pending = []
                depth = 1
            elif depth == 0:
                paren += (ch == "(") - (ch == ")" and paren > 0)
                if ch == ";" and paren == 0:
                    pending = []
                else:
                    if not pending or pending[-1][0] != no:
                        pending.append((no, ""))
                    pending[-1] = (no, pending[-1][1] + ch)
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    if body:
                        name, start = body
                        found.append((name, start, no,
                                      reason_above(orig, has_comment, lines, start)))
                    body = None
                    pending = []
        if depth == 0 and pending and pending[-1][0] == no:
            pending[-1] = (no, pending[-1][1] + " ")
    return found


def strip_parens(s):
    """s with every parenthesized part removed: a function header has no '='
    outside its parentheses, an initializer does."""
    out, depth = [], 0
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def header_start(pending):
    """The first line of the function header among the (line, text) pieces
    read since the last top-level item: the first one after the last line
    that closes a parenthesized group at depth 0 and is followed by more
    than attributes (that line is a macro call without a semicolon, such as
    F1(f_add, ...))."""
    depth, start = 0, None
    for k, (no, text) in enumerate(pending):
        if start is None and text.strip():
            start = no
        for ch in text:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
        rest = [t.strip() for _, t in pending[k + 1:] if t.strip()]
        if (depth == 0 and text.rstrip().endswith(")") and rest
                and not rest[0].startswith(("__attribute__", "__asm"))):
            start = None
    return start if start is not None else pending[-1][0]


def function_name(head):
    """The name in a function header: the identifier before its parameter
    list (the last parenthesized group, after trailing attributes), or the
    one inside a name-making macro such as SDPA_FN(name)."""
    head = re.sub(r"(\s*__attribute__\s*\(\(.*?\)\))+\s*$", "", head)
    depth, k = 0, len(head)
    while k > 0:
        k -= 1
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                break
    before = head[:k].rstrip()
    m = re.search(r"(\w+)\s*$", before) or re.search(r"(\w+)\s*\)\s*$", before)
    return m.group(1) if m else "?"


def source_files(root, dirs):
    """The .c and .h files under each of dirs, recursively, in a fixed order."""
    for d in dirs:
        for base, subdirs, names in os.walk(os.path.join(root, d)):
            subdirs.sort()
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    yield os.path.join(base, name)


def layer_offenders(root):
    """path:line messages for each include in src/F/ of a header of another
    folder of src/ that is not below F (a folder missing from LAYERS counts
    as an offence too, so a new layer has to be placed). Public headers
    ("nabla/...", from include/) are open to every layer."""
    found = []
    for path in source_files(root, FILE_DIRS):
        rel = os.path.relpath(path, root).split(os.sep)
        if len(rel) < 3:
            continue
        here = rel[1]
        with open(path, encoding="utf-8", errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == here:
                    continue
                there = m.group(1)
                if there not in LEVEL and not os.path.isdir(os.path.join(root, "src", there)):
                    continue
                if here not in LEVEL or there not in LEVEL:
                    unknown = here if here not in LEVEL else there
                    found.append("%s:%d: includes \"%s\" but src/%s is not in the layer order"
                                 % ("/".join(rel), no, line.split('"')[1], unknown))
                elif LEVEL[there] >= LEVEL[here]:
                    found.append("%s:%d: includes \"%s\": %s may include only its own headers "
                                 "and those of the layers below it (%s)"
                                 % ("/".join(rel), no, line.split('"')[1], here, order()))
    return found


def order():
    """The layer order as one line: core < kernels < ... ."""
    return " < ".join(", ".join(names) for names in LAYERS)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", ".."))
    offenders = []
    for path in source_files(root, FILE_DIRS):
        with open(path, encoding="utf-8", errors="replace") as fh:
            count = sum(1 for _ in fh)
        if count > MAX_FILE_LINES:
            offenders.append("%s:1: %d lines (over %d)"
                             % (os.path.relpath(path, root), count, MAX_FILE_LINES))
    n_files = n_funcs = 0
    for path in source_files(root, FUNC_DIRS):
        n_files += 1
        for name, first, last, reason in functions(path):
            n_funcs += 1
            length = last - first + 1
            if length > MAX_FUNC_LINES and not reason:
                offenders.append("%s:%d: %s is %d lines (over %d, and no \"%s\" comment above it)"
                                 % (os.path.relpath(path, root), first, name, length,
                                    MAX_FUNC_LINES, REASON))
    layers = layer_offenders(root)
    for o in offenders + layers:
        print(o)
    print("layout: %d files, %d functions checked, %d over the limits, %d includes across layers"
          % (n_files, n_funcs, len(offenders), len(layers)))
    offenders += layers
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
