#!/bin/sh
# gen_add_op_fixture.sh - the PyTorch fixture of the op that
# docs/contributing.md's "Adding an op" adds (softplus), for
# tests/check_add_op.c: applies the page's diffs to a scratch copy of the
# tree and runs gen_fixtures.py on that copy's op list. Needs Debian's
# python3-torch; run from anywhere:
#
#     sh tools/ref/gen_add_op_fixture.sh
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sh "$root/tools/test/add-op-copy.sh" "$root" "$tmp/tree"
/usr/bin/python3 "$root/tools/ref/gen_fixtures.py" "$tmp/tree/include/nabla/ops.def" softplus \
    "$root/tests/fixtures/add_op"
