"""op_list.py - the op list (include/nabla/ops.def) read from Python, for the
fixture generators: the same rows the C tables are generated from.

    rows = read_rows()              # [Row, ...] in the list's order
    row.name, row.hand              # "softplus", False
    row.inputs                      # [("REAL", (2, 3)), ...] for NB_OP rows
    row.torch                       # "F.softplus(x[0])"

A row is NB_OP(ID, name, n_in, formula, tangent, call, (inputs), torch) or
NB_OP_HAND(ID, name, n_in, formula, tangent); see the comment at the top of ops.def.
"""
import os
import re
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS_DEF = os.path.join(ROOT, "include", "nabla", "ops.def")

Row = namedtuple("Row", "id name n_in hand inputs torch")


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))


def _args(text, start):
    """The top-level comma-separated arguments of the call whose '(' is at
    text[start]; returns (args, index after the closing parenthesis)."""
    depth, i, cur, args = 0, start, [], []
    while i < len(text):
        ch = text[i]
        if ch == '"':  # a C string literal, escapes included
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if ch in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(ch)
        i += 1
    raise ValueError("ops.def: unbalanced parentheses")


def _c_string(lit):
    """The value of one or more adjacent C string literals."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', lit)
    return "".join(bytes(p, "utf-8").decode("unicode_escape") if "\\" in p else p
                   for p in parts)


def read_rows(path=OPS_DEF):
    text = _strip_comments(open(path, encoding="utf-8").read())
    rows = []
    for m in re.finditer(r"\bNB_OP(_HAND)?\s*\(", text):
        args, _ = _args(text, m.end() - 1)
        hand = m.group(1) is not None
        if hand:
            if len(args) != 5:
                raise ValueError("ops.def: NB_OP_HAND(%s) has %d fields, not 5"
                                 % (args[0], len(args)))
            rows.append(Row(args[0], args[1], int(args[2]), True, [], ""))
            continue
        if len(args) != 8:
            raise ValueError("ops.def: NB_OP(%s) has %d fields, not 8" % (args[0], len(args)))
        inputs = [(d, tuple(int(v) for v in dims.split(",") if v.strip()))
                  for d, dims in re.findall(r"NB_IN\(\s*(\w+)\s*((?:,\s*\d+\s*)*)\)", args[6])]
        if len(inputs) != int(args[2]):
            raise ValueError("ops.def: op %s has %s inputs but %d NB_IN"
                             % (args[1], args[2], len(inputs)))
        torch_expr = _c_string(args[7])
        if not torch_expr:
            raise ValueError("ops.def: op %s has no PyTorch expression" % args[1])
        rows.append(Row(args[0], args[1], int(args[2]), False, inputs, torch_expr))
    return rows
