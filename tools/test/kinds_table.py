#!/usr/bin/python3
"""kinds_table.py - rewrites the two tables of generated bad-input cases in
docs/reliability.md ("Bad input by argument kind": cases per kind, and cases
per function) from a run of the suite that makes them.

    python3 tools/test/kinds_table.py [BUILD_DIR]      (default build)

Runs BUILD_DIR/tests/check_nabla's matrix_kinds suite with NB_KINDS_SUMMARY=1
(each function's generated argument kinds and their case counts, one line
each: "kinds: nb_name kind n") and replaces the numbers of the per-kind table
(its values column is kept) and the whole per-function table, in the order the
suite runs them, and the total in the sentence that reports the result. Uses
only the Python standard library."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "reliability.md")


def summary(build):
    env = dict(os.environ, NB_KINDS_SUMMARY="1", CK_FORK="no", CK_RUN_SUITE="matrix_kinds",
               NB_BUILD_DIR=build)
    out = subprocess.run([os.path.join(build, "tests", "check_nabla")], env=env,
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"kinds: (\S+) (\S+) (\d+)$", line)
        if m:
            rows.append((m.group(1), m.group(2), int(m.group(3))))
    if not rows:
        raise SystemExit("kinds_table.py: the suite printed no 'kinds:' lines")
    return rows


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    rows = summary(build)
    per_kind, funcs, order = {}, {}, []
    for fn, kind, n in rows:
        base = kind.split(":")[0]
        k = per_kind.setdefault(base, {"functions": set(), "arguments": 0, "cases": 0})
        k["functions"].add(fn)
        k["arguments"] += 1
        k["cases"] += n
        if fn not in funcs:
            funcs[fn] = []
            order.append(fn)
        funcs[fn].append((kind, n))
    text = open(PAGE, encoding="utf-8").read()

    def kind_row(m):
        name, values = m.group(1), m.group(2)
        if name == "all":
            total = sum(k["cases"] for k in per_kind.values())
            return "| all | | %d | %d | **%d** |" % (len(funcs), len(rows), total)
        k = per_kind.get(name)
        if not k:
            raise SystemExit("kinds_table.py: the page's kind '%s' has no cases" % name)
        return "| %s | %s | %d | %d | %d |" % (name, values, len(k["functions"]), k["arguments"],
                                             k["cases"])

    text, n = re.subn(r"^\| (\w+) \|\s*([^|]*?)\s*\| \d+ \| \d+ \| (?:\*\*)?\d+(?:\*\*)? \|$",
                      kind_row, text, flags=re.M)
    if n != len(per_kind) + 1:
        raise SystemExit("kinds_table.py: the page lists %d kinds and 'all', the suite %d kinds"
                         % (n - 1, len(per_kind)))
    body = "".join("| `%s` | %d | %s |\n" % (fn, sum(c for _, c in funcs[fn]),
                                              ", ".join("%s %d" % kc for kc in funcs[fn]))
                   for fn in order)
    text, n = re.subn(r"(\| function \| cases \| by argument kind \|\n\| --- \| ---: \| --- \|\n)"
                      r"(?:\| `nb_[^\n]*\n)+", lambda m: m.group(1) + body, text)
    if n != 1:
        raise SystemExit("kinds_table.py: no per-function table in " + PAGE)
    total = sum(k["cases"] for k in per_kind.values())
    text = re.sub(r"\*\*\d+ cases, 0 crashes", "**%d cases, 0 crashes" % total, text)
    open(PAGE, "w", encoding="utf-8").write(text)
    print("kinds_table.py: %d functions, %d arguments, %d cases" % (len(funcs), len(rows), total))


if __name__ == "__main__":
    main()
