#!/usr/bin/python3
"""make_playground.py - writes the playground (docs/playground.html): the
page of tools/wasm/playground.html with nabla.js (make wasm, the wasm
inlined), the tape explorer's page (src/teach/tape_page.html and
tape_page.js, which the playground fills with each Run's tape) and
tools/wasm/playground.js put into its scripts. One file, nothing fetched.

    python3 tools/wasm/make_playground.py NABLA_JS OUT      (make playground)"""
import json
import os
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def script_safe(text, what):
    """text for an inline <script>: nothing in it may close the element."""
    if "</script" in text.lower():
        sys.exit(f"make_playground: {what} contains '</script', which would end the page's script")
    return text


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_playground.py NABLA_JS OUT")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page = read(os.path.join(root, "tools/wasm/playground.html"))
    explorer = {"head": read(os.path.join(root, "src/teach/tape_page.html")),
                "script": read(os.path.join(root, "src/teach/tape_page.js"))}
    parts = {
        "/*NABLA_JS*/": script_safe(read(sys.argv[1]), sys.argv[1]),
        "/*EXPLORER*/": "var EXPLORER = " + json.dumps(explorer).replace("</", "<\\/") + ";",
        "/*PLAYGROUND_JS*/": script_safe(read(os.path.join(root, "tools/wasm/playground.js")),
                                         "playground.js"),
    }
    for mark, text in parts.items():
        if page.count(mark) != 1:
            sys.exit(f"make_playground: {mark} is not once in tools/wasm/playground.html")
        page = page.replace(mark, text)
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, sys.argv[2])
    size = os.path.getsize(sys.argv[2])
    print(f"playground: {sys.argv[2]} {size} bytes ({size / 2**20:.2f} MB; target <= 3 MB)")


if __name__ == "__main__":
    main()
